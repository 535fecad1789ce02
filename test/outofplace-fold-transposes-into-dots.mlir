// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-fold-transposes-into-dots)' \
// RUN:   | FileCheck %s

// nn.Linear as torch-mlir lowers it: the dot reads the weight where it is.
// CHECK-LABEL: func.func @linear(
// CHECK-SAME:    %[[W:.*]]: tensor<6x4xf32>, %[[X:.*]]: tensor<1x4xf32>
// CHECK-NOT:     stablehlo.transpose
// CHECK:         %[[Y:.*]] = stablehlo.dot_general %[[X]], %[[W]], contracting_dims = [1] x [1] : (tensor<1x4xf32>, tensor<6x4xf32>) -> tensor<1x6xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @linear(%w: tensor<6x4xf32>, %x: tensor<1x4xf32>) -> tensor<1x6xf32> {
  %0 = stablehlo.transpose %w, dims = [1, 0] : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %1 = stablehlo.dot_general %x, %0, contracting_dims = [1] x [0] : (tensor<1x4xf32>, tensor<4x6xf32>) -> tensor<1x6xf32>
  return %1 : tensor<1x6xf32>
}

// A weight gradient (grad^T @ x): the transposed lhs folded, batch dimensions mapped too.
// CHECK-LABEL: func.func @both_sides_batched(
// CHECK-SAME:    %[[A:.*]]: tensor<2x5x3xf32>, %[[B:.*]]: tensor<2x5x4xf32>
// CHECK:         stablehlo.dot_general %[[A]], %[[B]], batching_dims = [0] x [0], contracting_dims = [1] x [1] : (tensor<2x5x3xf32>, tensor<2x5x4xf32>) -> tensor<2x3x4xf32>
func.func @both_sides_batched(%a: tensor<2x5x3xf32>, %b: tensor<2x5x4xf32>) -> tensor<2x3x4xf32> {
  %0 = stablehlo.transpose %a, dims = [0, 2, 1] : (tensor<2x5x3xf32>) -> tensor<2x3x5xf32>
  %1 = stablehlo.dot_general %0, %b, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x3x5xf32>, tensor<2x5x4xf32>) -> tensor<2x3x4xf32>
  return %1 : tensor<2x3x4xf32>
}

// A transpose read elsewhere stays for that reader.
// CHECK-LABEL: func.func @shared(
// CHECK:         %[[T:.*]] = stablehlo.transpose
// CHECK:         stablehlo.dot_general %{{.*}}, %arg0, contracting_dims = [1] x [1]
// CHECK:         return %{{.*}}, %[[T]]
func.func @shared(%w: tensor<6x4xf32>, %x: tensor<1x4xf32>) -> (tensor<1x6xf32>, tensor<4x6xf32>) {
  %0 = stablehlo.transpose %w, dims = [1, 0] : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %1 = stablehlo.dot_general %x, %0, contracting_dims = [1] x [0] : (tensor<1x4xf32>, tensor<4x6xf32>) -> tensor<1x6xf32>
  return %1, %0 : tensor<1x6xf32>, tensor<4x6xf32>
}

// Free dimensions that would change order through the permutation: left as it is.
// CHECK-LABEL: func.func @free_dims_reordered(
// CHECK:         %[[T:.*]] = stablehlo.transpose %arg0, dims = [2, 1, 0]
// CHECK:         stablehlo.dot_general %[[T]], %arg1, contracting_dims = [1] x [0]
func.func @free_dims_reordered(%a: tensor<3x5x2xf32>, %b: tensor<5x4xf32>) -> tensor<2x3x4xf32> {
  %0 = stablehlo.transpose %a, dims = [2, 1, 0] : (tensor<3x5x2xf32>) -> tensor<2x5x3xf32>
  %1 = stablehlo.dot_general %0, %b, contracting_dims = [1] x [0] : (tensor<2x5x3xf32>, tensor<5x4xf32>) -> tensor<2x3x4xf32>
  return %1 : tensor<2x3x4xf32>
}

// nn.Linear on a 3-d input: the transposed weight broadcast to a batch of one. The batch
// pair lost its weight side: the input's unit dimension is free (the same result type).
// CHECK-LABEL: func.func @linear_3d(
// CHECK-SAME:    %[[W:.*]]: tensor<6x4xf32>, %[[X:.*]]: tensor<1x1x4xf32>
// CHECK-NOT:     stablehlo.transpose
// CHECK-NOT:     stablehlo.broadcast_in_dim
// CHECK:         %[[D:.*]] = stablehlo.dot_general %[[X]], %[[W]], contracting_dims = [2] x [1] : (tensor<1x1x4xf32>, tensor<6x4xf32>) -> tensor<1x1x6xf32>
// CHECK-NEXT:    return %[[D]]
func.func @linear_3d(%w: tensor<6x4xf32>, %x: tensor<1x1x4xf32>) -> tensor<1x1x6xf32> {
  %0 = stablehlo.transpose %w, dims = [1, 0] : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %1 = stablehlo.broadcast_in_dim %0, dims = [1, 2] : (tensor<4x6xf32>) -> tensor<1x4x6xf32>
  %2 = stablehlo.dot_general %x, %1, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<1x1x4xf32>, tensor<1x4x6xf32>) -> tensor<1x1x6xf32>
  return %2 : tensor<1x1x6xf32>
}

// A batch dimension only one side has, the other broadcast to it (a 3-d nn.Linear's weight,
// grouped-query attention's repeat): the dot reads the broadcast's operand once, the batch
// dimension free on the side that has it.
// CHECK-LABEL: func.func @batch_broadcast(
// CHECK-NOT:     stablehlo.broadcast_in_dim
// CHECK:         %[[D:.*]] = stablehlo.dot_general %arg1, %arg0, contracting_dims = [2] x [0] : (tensor<2x1x4xf32>, tensor<4x6xf32>) -> tensor<2x1x6xf32>
// CHECK-NEXT:    return %[[D]]
func.func @batch_broadcast(%k: tensor<4x6xf32>, %q: tensor<2x1x4xf32>) -> tensor<2x1x6xf32> {
  %0 = stablehlo.broadcast_in_dim %k, dims = [1, 2] : (tensor<4x6xf32>) -> tensor<2x4x6xf32>
  %1 = stablehlo.dot_general %q, %0, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x1x4xf32>, tensor<2x4x6xf32>) -> tensor<2x1x6xf32>
  return %1 : tensor<2x1x6xf32>
}

// Broadcast dimensions the dot cannot drop: a free one (the result repeats rows), a
// contracted one (a sum of equal terms), a batch one both sides broadcast.
// CHECK-LABEL: func.func @broadcasts_kept(
// CHECK:         %[[X:.*]] = stablehlo.broadcast_in_dim %arg0
// CHECK-NEXT:    stablehlo.dot_general %[[X]], %arg1, contracting_dims = [1] x [0]
// CHECK-NEXT:    stablehlo.dot_general %[[X]], %arg4, contracting_dims = [0] x [0]
// CHECK-NEXT:    %[[A:.*]] = stablehlo.broadcast_in_dim %arg2
// CHECK-NEXT:    %[[B:.*]] = stablehlo.broadcast_in_dim %arg3
// CHECK-NEXT:    stablehlo.dot_general %[[A]], %[[B]], batching_dims = [0] x [0], contracting_dims = [2] x [1]
func.func @broadcasts_kept(%x: tensor<4xf32>, %w: tensor<4x5xf32>, %a: tensor<1x3xf32>, %b: tensor<3x6xf32>, %c: tensor<3x5xf32>) -> (tensor<3x5xf32>, tensor<4x5xf32>, tensor<2x1x6xf32>) {
  %0 = stablehlo.broadcast_in_dim %x, dims = [1] : (tensor<4xf32>) -> tensor<3x4xf32>
  %1 = stablehlo.dot_general %0, %w, contracting_dims = [1] x [0] : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %2 = stablehlo.dot_general %0, %c, contracting_dims = [0] x [0] : (tensor<3x4xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
  %3 = stablehlo.broadcast_in_dim %a, dims = [1, 2] : (tensor<1x3xf32>) -> tensor<2x1x3xf32>
  %4 = stablehlo.broadcast_in_dim %b, dims = [1, 2] : (tensor<3x6xf32>) -> tensor<2x3x6xf32>
  %5 = stablehlo.dot_general %3, %4, batching_dims = [0] x [0], contracting_dims = [2] x [1] : (tensor<2x1x3xf32>, tensor<2x3x6xf32>) -> tensor<2x1x6xf32>
  return %1, %2, %5 : tensor<3x5xf32>, tensor<4x5xf32>, tensor<2x1x6xf32>
}

// A unit batch dimension the lhs has after its free one: the new result orders the unit
// dimensions otherwise, a reshape restores the type.
// CHECK-LABEL: func.func @unit_batch_moved(
// CHECK:         %[[D:.*]] = stablehlo.dot_general %arg1, %arg0, contracting_dims = [0] x [1] : (tensor<4x3x1xf32>, tensor<6x4xf32>) -> tensor<3x1x6xf32>
// CHECK-NEXT:    %[[Y:.*]] = stablehlo.reshape %[[D]] : (tensor<3x1x6xf32>) -> tensor<1x3x6xf32>
// CHECK-NEXT:    return %[[Y]]
func.func @unit_batch_moved(%w: tensor<6x4xf32>, %x: tensor<4x3x1xf32>) -> tensor<1x3x6xf32> {
  %0 = stablehlo.transpose %w, dims = [1, 0] : (tensor<6x4xf32>) -> tensor<4x6xf32>
  %1 = stablehlo.broadcast_in_dim %0, dims = [1, 2] : (tensor<4x6xf32>) -> tensor<1x4x6xf32>
  %2 = stablehlo.dot_general %x, %1, batching_dims = [2] x [0], contracting_dims = [0] x [1] : (tensor<4x3x1xf32>, tensor<1x4x6xf32>) -> tensor<1x3x6xf32>
  return %2 : tensor<1x3x6xf32>
}
