// The template instances of LaunchMeanPooling that are compiled: every element type, form,
// vector width (16 bytes or one value) and stage count in mean_pooling_space.h. One list, used
// by the .cu (explicit instantiation) and by the dispatch switch, so the two cannot disagree.
//
// KS_FOR_EACH_POOLING_INSTANCE(X) calls X(DTYPE, CTYPE, FORM, VEC, STAGES) once per instance:
// DTYPE a DType enumerator name, CTYPE the CUDA element type, FORM a PoolingForm enumerator
// name, VEC the values per lane, STAGES the rows loaded per thread before summing.
#ifndef KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_INSTANCES_H_
#define KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_INSTANCES_H_

#define KS_POOLING_STAGES_(X, DT, CT, FORM, VEC) X(DT, CT, FORM, VEC, 4) X(DT, CT, FORM, VEC, 8)
#define KS_POOLING_VECS_(X, DT, CT, VEC, FORM) \
  KS_POOLING_STAGES_(X, DT, CT, FORM, VEC) KS_POOLING_STAGES_(X, DT, CT, FORM, 1)
#define KS_POOLING_FORMS_(X, DT, CT, VEC)  \
  KS_POOLING_VECS_(X, DT, CT, VEC, kDense) \
  KS_POOLING_VECS_(X, DT, CT, VEC, kMasked) KS_POOLING_VECS_(X, DT, CT, VEC, kVarlen)
#define KS_FOR_EACH_POOLING_INSTANCE(X) \
  KS_POOLING_FORMS_(X, kF32, float, 4)  \
  KS_POOLING_FORMS_(X, kF16, __half, 8) KS_POOLING_FORMS_(X, kBF16, __nv_bfloat16, 8)

#endif  // KERNELSERVE_KERNELS_MEAN_POOLING_CUDA_MEAN_POOLING_INSTANCES_H_
