// Bad input: one line on stderr, exit code 1, no traceback.
// RUN: not outofplace-opt %s 2>&1 | FileCheck %s --check-prefix=PARSE
// PARSE: outofplace-opt: error: cannot parse input: {{.*}}bad-input.mlir:{{[0-9]+}}:{{[0-9]+}}: expected ')'
// PARSE-NOT: Traceback

func.func @truncated(%x: !torch.tensor<[4],f32>
// RUN: not outofplace-opt %s --pass-pipeline='builtin.module(no-such-pass)' 2>&1 | FileCheck %s --check-prefix=PASS
// PASS: outofplace-opt: error: unknown or malformed pass 'no-such-pass'
// RUN: not outofplace-opt %s --pass-pipeline='inplace-to-outofplace' 2>&1 | FileCheck %s --check-prefix=FORM
// FORM: outofplace-opt: error: expected a pipeline of the form 'builtin.module(...)'
// RUN: not outofplace-opt %t.does-not-exist 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: outofplace-opt: error: cannot read '{{.*}}does-not-exist'
// RUN: not outofplace-opt --no-such-flag 2>&1 | FileCheck %s --check-prefix=FLAG
// FLAG: outofplace-opt: error: unrecognized arguments: --no-such-flag
// RUN: not outofplace-opt %s --pass-pipeline='builtin.module(outofplace-lower-updates{strided=diagonal})' 2>&1 | FileCheck %s --check-prefix=VALUE
// VALUE: outofplace-opt: error: option 'strided' of 'outofplace-lower-updates' is one of cheaper, scatter, select, not 'diagonal'
// RUN: not outofplace-opt %s --pass-pipeline='builtin.module(outofplace-lower-updates{nope=1})' 2>&1 | FileCheck %s --check-prefix=OPTION
// OPTION: outofplace-opt: error: 'outofplace-lower-updates' has no option 'nope=1' (it takes strided)
// RUN: not outofplace-opt %s --pass-pipeline='builtin.module(outofplace-fold-constants{strided=scatter})' 2>&1 | FileCheck %s --check-prefix=NONE
// NONE: outofplace-opt: error: 'outofplace-fold-constants' has no option 'strided=scatter' (it takes no options)
// RUN: not outofplace-opt %s --pass-pipeline='builtin.module(inplace-to-stablehlo-pipeline{x=1})' 2>&1 | FileCheck %s --check-prefix=PIPELINE
// PIPELINE: outofplace-opt: error: 'inplace-to-stablehlo-pipeline' takes no options
