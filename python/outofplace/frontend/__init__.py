"""Stage 1: a torch program to mutable torch IR, mutations kept.

`importer` traces the program with torch.export, rewrites the FX graph while fake
tensors still know storages (`fx_rewrites`, facts from `fx_graph`, `strided_views`,
`runtime_positions`, `masked_values`), imports it with torch-mlir's FxImporter and marks
written tensors `!torch.tensor`.
"""
