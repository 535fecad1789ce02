# RUN: %PYTHON %s | FileCheck %s
"""`mark_mutable_tensors` on its own, through its Python entry point: its input (the
importer's in-place ops on !torch.vtensor operands) does not pass the verifier, so it is
no textual pass (docs/passes.md). Written tensors and their views become !torch.tensor,
in-place ops get torch.copy.to_tensor operands, lists read values."""

import torch
from torch_mlir.extras.fx_importer import FxImporter

from outofplace.context import make_context
from outofplace.frontend.mutable_tensors import mark_mutable_tensors


def run(f, *args):
    print(f"TEST: {type(f).__name__}")
    ep = torch.export.export(f, args, strict=False)
    context = make_context()
    importer = FxImporter(context=context)
    func = importer.import_stateless_graph(ep.graph_module.graph, func_name="main")
    with context:
        mark_mutable_tensors(func.operation.opview)
        importer.module.operation.verify()
        print(importer.module.operation.get_asm())


class WriteThroughView(torch.nn.Module):
    def forward(self, x, y):
        x[1:].add_(y)
        return x.sum()


# The written root and its view are !torch.tensor; y, only read, stays a value.
# CHECK-LABEL: TEST: WriteThroughView
# CHECK:       func.func @main(%[[X:.*]]: !torch.tensor<[4],f32>, %[[Y:.*]]: !torch.vtensor<[3],f32>)
# CHECK:         %[[VIEW:.*]] = torch.aten.slice.Tensor %[[X]], {{.*}} : !torch.tensor<[4],f32>, {{.*}} -> !torch.tensor<[3],f32>
# CHECK:         %[[Y_T:.*]] = torch.copy.to_tensor %[[Y]] : !torch.tensor<[3],f32>
# CHECK:         torch.aten.add_.Tensor %[[VIEW]], %[[Y_T]], {{.*}} : !torch.tensor<[3],f32>, !torch.tensor<[3],f32>, !torch.int -> !torch.tensor<[3],f32>
# CHECK:         torch.aten.sum %[[X]], {{.*}} : !torch.tensor<[4],f32>, !torch.none -> !torch.vtensor<[],f32>
run(WriteThroughView(), torch.zeros(4), torch.ones(3))


class ListOfWritten(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)
        return torch.cat([x, x])


# A list holds values: the written tensor is read into it with torch.copy.to_vtensor.
# CHECK-LABEL: TEST: ListOfWritten
# CHECK:       func.func @main(%[[X:.*]]: !torch.tensor<[2],f32>)
# CHECK:         %[[MUL:.*]] = torch.aten.mul_.Tensor %[[X]], {{.*}} -> !torch.tensor<[2],f32>
# CHECK:         %[[V0:.*]] = torch.copy.to_vtensor %[[MUL]] : !torch.vtensor<[2],f32>
# CHECK:         %[[V1:.*]] = torch.copy.to_vtensor %[[MUL]] : !torch.vtensor<[2],f32>
# CHECK:         torch.prim.ListConstruct %[[V0]], %[[V1]] : (!torch.vtensor<[2],f32>, !torch.vtensor<[2],f32>)
run(ListOfWritten(), torch.ones(2))


class NothingWritten(torch.nn.Module):
    def forward(self, x):
        return x[1:] * 2


# Without writes nothing changes.
# CHECK-LABEL: TEST: NothingWritten
# CHECK:       func.func @main(%{{.*}}: !torch.vtensor<[4],f32>) -> !torch.vtensor<[3],f32>
# CHECK-NOT:   !torch.tensor
# CHECK:       return
run(NothingWritten(), torch.ones(4))
