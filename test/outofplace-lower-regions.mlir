// RUN: outofplace-opt %s --split-input-file --use-name-loc-as-prefix \
// RUN:   --pass-pipeline='builtin.module(inplace-to-stablehlo-pipeline)' | FileCheck %s

// A torch.cond whose true branch writes c[0] (frontend/control_flow.py made it a region
// op returning c's new value, and a copy_ of it into c): stablehlo.if, the false branch
// returning c unchanged; c stays aliased to main's result.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[C:.*]]: tensor<3x4xf32> {tf.aliasing_output = 1 : i32},
// CHECK-SAME:    %[[K:.*]]: tensor<4xf32>, %[[P:.*]]: tensor<i1>)
// CHECK-SAME:    -> (tensor<4xf32>, tensor<3x4xf32>)
// CHECK:         %[[IF:.*]]:2 = "stablehlo.if"(%[[P]]) ({
// CHECK:           %[[ROW:.*]] = stablehlo.add %{{.*}}, %[[K]] : tensor<4xf32>
// CHECK:           %[[ROW2:.*]] = stablehlo.reshape %[[ROW]] : (tensor<4xf32>) -> tensor<1x4xf32>
// CHECK:           %[[NEW:c_modified]] = stablehlo.dynamic_update_slice %[[C]], %[[ROW2]]
// CHECK:           %[[TWICE:.*]] = stablehlo.multiply %[[K]]
// CHECK:           stablehlo.return %[[TWICE]], %[[NEW]] : tensor<4xf32>, tensor<3x4xf32>
// CHECK:         }, {
// CHECK:           %[[LESS:.*]] = stablehlo.subtract %[[K]]
// CHECK:           stablehlo.return %[[LESS]], %[[C]] : tensor<4xf32>, tensor<3x4xf32>
// CHECK:         }) : (tensor<i1>) -> (tensor<4xf32>, tensor<3x4xf32>)
// CHECK:         return %[[IF]]#0, %[[IF]]#1 : tensor<4xf32>, tensor<3x4xf32>
// CHECK-NOT:     torch
module {
  func.func @main(%c: !torch.tensor<[3,4],f32> loc("c"), %k: !torch.vtensor<[4],f32> loc("k"), %p: !torch.vtensor<[],i1> loc("p")) -> !torch.vtensor<[4],f32> {
    %int0 = torch.constant.int 0
    %c0 = torch.copy.to_vtensor %c : !torch.vtensor<[3,4],f32>
    %ops = torch.prim.ListConstruct %p, %k, %c0 : (!torch.vtensor<[],i1>, !torch.vtensor<[4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.list<vtensor>
    %r = torch.operator "torch.outofplace.region"(%int0, %ops) {outofplace.carried = 0 : i64, outofplace.functions = [@region0_true, @region0_false], outofplace.kind = "cond", outofplace.written = [1]} : (!torch.int, !torch.list<vtensor>) -> !torch.list<vtensor>
    %0:2 = torch.prim.ListUnpack %r : !torch.list<vtensor> -> !torch.vtensor<[4],f32>, !torch.vtensor<[3,4],f32>
    %false = torch.constant.bool false
    %1 = torch.copy.to_tensor %0#1 : !torch.tensor<[3,4],f32>
    %2 = torch.aten.copy_ %c, %1, %false : !torch.tensor<[3,4],f32>, !torch.tensor<[3,4],f32>, !torch.bool -> !torch.tensor<[3,4],f32>
    return %0#0 : !torch.vtensor<[4],f32>
  }
  func.func private @region0_true(%k: !torch.vtensor<[4],f32> loc("k"), %c: !torch.tensor<[3,4],f32> loc("c")) -> (!torch.vtensor<[4],f32>, !torch.tensor<[3,4],f32>) {
    %int0 = torch.constant.int 0
    %int1 = torch.constant.int 1
    %int2 = torch.constant.int 2
    %0 = torch.aten.select.int %c, %int0, %int0 : !torch.tensor<[3,4],f32>, !torch.int, !torch.int -> !torch.tensor<[4],f32>
    %1 = torch.copy.to_tensor %k : !torch.tensor<[4],f32>
    %2 = torch.aten.add_.Tensor %0, %1, %int1 : !torch.tensor<[4],f32>, !torch.tensor<[4],f32>, !torch.int -> !torch.tensor<[4],f32>
    %3 = torch.aten.mul.Scalar %k, %int2 : !torch.vtensor<[4],f32>, !torch.int -> !torch.vtensor<[4],f32>
    return %3, %c : !torch.vtensor<[4],f32>, !torch.tensor<[3,4],f32>
  }
  func.func private @region0_false(%k: !torch.vtensor<[4],f32> loc("k"), %c: !torch.vtensor<[3,4],f32> loc("c")) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[3,4],f32>) {
    %int1 = torch.constant.int 1
    %0 = torch.aten.sub.Scalar %k, %int1, %int1 : !torch.vtensor<[4],f32>, !torch.int, !torch.int -> !torch.vtensor<[4],f32>
    return %0, %c : !torch.vtensor<[4],f32>, !torch.vtensor<[3,4],f32>
  }
}

// -----

// A while_loop whose body writes cache[start + i] (a closure): every operand carried,
// the cache written by one dynamic_update_slice per iteration and returned; the loop's
// last cache is main's aliased result, the read-only operands pass through.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[CACHE:.*]]: tensor<8x4xf32> {tf.aliasing_output = 1 : i32},
// CHECK-SAME:    %[[H:.*]]: tensor<4xf32>, %[[START:.*]]: tensor<i64>, %[[N:.*]]: tensor<i64>)
// CHECK-SAME:    -> (tensor<4xf32>, tensor<8x4xf32>)
// CHECK:         %[[ZERO:.*]] = stablehlo.constant dense<0> : tensor<i64>
// CHECK:         %[[LOOP:.*]]:5 = stablehlo.while(%[[I:.*]] = %[[ZERO]], %[[HH:.*]] = %[[H]], %[[NN:.*]] = %[[N]], %[[SS:.*]] = %[[START]], %[[CC:.*]] = %[[CACHE]])
// CHECK:         cond {
// CHECK:           %[[LT:.*]] = stablehlo.compare LT, %[[I]], %[[NN]], SIGNED
// CHECK:           stablehlo.return %[[LT]] : tensor<i1>
// CHECK:         } do {
// CHECK:           %[[POS:.*]] = stablehlo.add %[[SS]], %[[I]] : tensor<i64>
// CHECK:           %[[NEW:cache_modified]] = stablehlo.dynamic_update_slice %[[CC]], %{{.*}}, %{{.*}}, %{{.*}} : (tensor<8x4xf32>, tensor<1x4xf32>, tensor<i64>, tensor<i64>) -> tensor<8x4xf32>
// CHECK:           %[[NEXT:.*]] = stablehlo.add %[[I]], %{{.*}} : tensor<i64>
// CHECK:           stablehlo.return %[[NEXT]], %{{.*}}, %[[NN]], %[[SS]], %[[NEW]] : tensor<i64>, tensor<4xf32>, tensor<i64>, tensor<i64>, tensor<8x4xf32>
// CHECK:         }
// CHECK:         return %[[LOOP]]#1, %[[LOOP]]#4 : tensor<4xf32>, tensor<8x4xf32>
// CHECK-NOT:     torch
module {
  func.func @main(%cache: !torch.tensor<[8,4],f32> loc("cache"), %h: !torch.vtensor<[4],f32> loc("h"), %start: !torch.vtensor<[],si64> loc("start"), %n: !torch.vtensor<[],si64> loc("n")) -> !torch.vtensor<[4],f32> {
    %0 = torch.prim.ListConstruct  : () -> !torch.list<int>
    %int4 = torch.constant.int 4
    %none = torch.constant.none
    %cpu = torch.constant.device "cpu"
    %false = torch.constant.bool false
    %1 = torch.aten.zeros %0, %int4, %none, %cpu, %false : !torch.list<int>, !torch.int, !torch.none, !torch.Device, !torch.bool -> !torch.vtensor<[],si64>
    %int1 = torch.constant.int 1
    %c0 = torch.copy.to_vtensor %cache : !torch.vtensor<[8,4],f32>
    %ops = torch.prim.ListConstruct %1, %h, %n, %start, %c0 : (!torch.vtensor<[],si64>, !torch.vtensor<[4],f32>, !torch.vtensor<[],si64>, !torch.vtensor<[],si64>, !torch.vtensor<[8,4],f32>) -> !torch.list<vtensor>
    %r = torch.operator "torch.outofplace.region"(%int1, %ops) {outofplace.carried = 2 : i64, outofplace.functions = [@region1_cond, @region1_body], outofplace.kind = "while", outofplace.written = [4]} : (!torch.int, !torch.list<vtensor>) -> !torch.list<vtensor>
    %2:3 = torch.prim.ListUnpack %r : !torch.list<vtensor> -> !torch.vtensor<[],si64>, !torch.vtensor<[4],f32>, !torch.vtensor<[8,4],f32>
    %3 = torch.copy.to_tensor %2#2 : !torch.tensor<[8,4],f32>
    %4 = torch.aten.copy_ %cache, %3, %false : !torch.tensor<[8,4],f32>, !torch.tensor<[8,4],f32>, !torch.bool -> !torch.tensor<[8,4],f32>
    return %2#1 : !torch.vtensor<[4],f32>
  }
  func.func private @region1_cond(%i: !torch.vtensor<[],si64>, %h: !torch.vtensor<[4],f32>, %n: !torch.vtensor<[],si64>, %start: !torch.vtensor<[],si64>, %cache: !torch.vtensor<[8,4],f32>) -> !torch.vtensor<[],i1> {
    %0 = torch.aten.lt.Tensor %i, %n : !torch.vtensor<[],si64>, !torch.vtensor<[],si64> -> !torch.vtensor<[],i1>
    return %0 : !torch.vtensor<[],i1>
  }
  func.func private @region1_body(%i: !torch.vtensor<[],si64> loc("i"), %h: !torch.vtensor<[4],f32> loc("h"), %n: !torch.vtensor<[],si64> loc("n"), %start: !torch.vtensor<[],si64> loc("start"), %cache: !torch.tensor<[8,4],f32> loc("cache")) -> (!torch.vtensor<[],si64>, !torch.vtensor<[4],f32>, !torch.tensor<[8,4],f32>) {
    %int1 = torch.constant.int 1
    %false = torch.constant.bool false
    %0 = torch.aten.tanh %h : !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
    %1 = torch.aten.add.Tensor %start, %i, %int1 : !torch.vtensor<[],si64>, !torch.vtensor<[],si64>, !torch.int -> !torch.vtensor<[],si64>
    %2 = torch.prim.ListConstruct %1 : (!torch.vtensor<[],si64>) -> !torch.list<optional<vtensor>>
    %3 = torch.copy.to_tensor %0 : !torch.tensor<[4],f32>
    %4 = torch.aten.index_put_ %cache, %2, %3, %false : !torch.tensor<[8,4],f32>, !torch.list<optional<vtensor>>, !torch.tensor<[4],f32>, !torch.bool -> !torch.tensor<[8,4],f32>
    %5 = torch.aten.add.Scalar %i, %int1, %int1 : !torch.vtensor<[],si64>, !torch.int, !torch.int -> !torch.vtensor<[],si64>
    return %5, %0, %cache : !torch.vtensor<[],si64>, !torch.vtensor<[4],f32>, !torch.tensor<[8,4],f32>
  }
}

// -----

// An op kept whole (frontend/composites.py: a region of kind "composite"): a
// stablehlo.composite named after the op, with its attributes, its decomposition the
// region's function lowered, private.
// CHECK-LABEL: func.func @main(
// CHECK-SAME:    %[[X:.*]]: tensor<4x3xf32>, %[[W:.*]]: tensor<3xf32>)
// CHECK-NEXT:    %[[R:.*]] = stablehlo.composite "aten.mul.Tensor" %[[X]], %[[W]] {composite_attributes = {outofplace.kernel = "aten::mul.Tensor", outofplace.returns = array<i64: 0>, outofplace.tensors = array<i64: 0, 1>, outofplace.written = array<i64>}, decomposition = @aten.mul.Tensor.region2_body} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:    return %[[R]] : tensor<4x3xf32>
// CHECK:       func.func private @aten.mul.Tensor.region2_body(%[[A:.*]]: tensor<4x3xf32>, %[[B:.*]]: tensor<3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:    %[[BB:.*]] = stablehlo.broadcast_in_dim %[[B]], dims = [1] : (tensor<3xf32>) -> tensor<4x3xf32>
// CHECK-NEXT:    %[[P:.*]] = stablehlo.multiply %[[A]], %[[BB]] : tensor<4x3xf32>
// CHECK-NEXT:    return %[[P]] : tensor<4x3xf32>
// CHECK-NOT:     torch
module {
  func.func @main(%x: !torch.vtensor<[4,3],f32> loc("x"), %w: !torch.vtensor<[3],f32> loc("w")) -> !torch.vtensor<[4,3],f32> {
    %int2 = torch.constant.int 2
    %ops = torch.prim.ListConstruct %x, %w : (!torch.vtensor<[4,3],f32>, !torch.vtensor<[3],f32>) -> !torch.list<vtensor>
    %r = torch.operator "torch.outofplace.region"(%int2, %ops) {outofplace.carried = 0 : i64, outofplace.composite = "aten.mul.Tensor", outofplace.composite_attributes = {outofplace.kernel = "aten::mul.Tensor", outofplace.returns = array<i64: 0>, outofplace.tensors = array<i64: 0, 1>, outofplace.written = array<i64>}, outofplace.functions = [@region2_body], outofplace.kind = "composite", outofplace.written = []} : (!torch.int, !torch.list<vtensor>) -> !torch.list<vtensor>
    %0 = torch.prim.ListUnpack %r : !torch.list<vtensor> -> !torch.vtensor<[4,3],f32>
    return %0 : !torch.vtensor<[4,3],f32>
  }
  func.func private @region2_body(%a: !torch.vtensor<[4,3],f32> loc("x"), %b: !torch.vtensor<[3],f32> loc("w")) -> !torch.vtensor<[4,3],f32> {
    %0 = torch.aten.mul.Tensor %a, %b : !torch.vtensor<[4,3],f32>, !torch.vtensor<[3],f32> -> !torch.vtensor<[4,3],f32>
    return %0 : !torch.vtensor<[4,3],f32>
  }
}
