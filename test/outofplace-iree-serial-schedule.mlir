// RUN: outofplace-opt %s --pass-pipeline='builtin.module(outofplace-iree-serial-schedule)' | FileCheck %s

// IREE's debug partitioning: one command at a time.
// CHECK: module attributes {stream.partitioning = #stream.partitioning_config<"debug">}
func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
  return %x : tensor<3xf32>
}
