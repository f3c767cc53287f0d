extern "C" __global__ void __launch_bounds__(1024) main_kernel_4(float* __restrict__ A_reindex_reindex_shared_ptr, float* __restrict__ A_reindex_reindex_shared_shared_wmma_accumulator_ptr);
extern "C" __global__ void __launch_bounds__(1024) main_kernel_5(float* __restrict__ A_reindex_ptr, float* __restrict__ A_reindex_reindex_shared_shared_wmma_accumulator_ptr);
extern "C" __global__ void __launch_bounds__(1024) main_kernel_6(float* __restrict__ A_reindex_ptr, float* __restrict__ A_reindex_ptr_1);
extern "C" __global__ void __launch_bounds__(1024) main_kernel_7(float* __restrict__ A_reindex_ptr, float* __restrict__ T_multiply_ptr);
extern "C" __global__ void __launch_bounds__(1024) main_kernel_8(float* __restrict__ T_multiply_ptr, float* __restrict__ T_multiply_red_ptr);
extern "C" __global__ void __launch_bounds__(1024) main_kernel_9(float* __restrict__ T_multiply_red_ptr, float* __restrict__ T_multiply_red_ptr_1);
extern "C" __global__ void __launch_bounds__(1024) main_kernel_10(float* __restrict__ B_ptr, float* __restrict__ T_cast_2_ptr);
extern "C" __global__ void __launch_bounds__(1024) main_kernel_11(float* __restrict__ A_reindex_ptr, float* __restrict__ A_reindex_ptr_1, float* __restrict__ T_cast_2_ptr, float* __restrict__ T_multiply_red_ptr);
extern "C" __global__ void __launch_bounds__(1024) main_kernel_12(float* __restrict__ A_reindex_ptr, float* __restrict__ T_cast_ptr);
extern "C" __global__ void __launch_bounds__(1024) main_kernel(float* __restrict__ A_ptr, float* __restrict__ A_reindex_ptr) {
  for (int ax0_ax1_fused_0 = 0; ax0_ax1_fused_0 < 50; ++ax0_ax1_fused_0) {
    if (((ax0_ax1_fused_0 * 4) + (((int)blockIdx.x) >> 6)) < 197) {
      int cse_v5 = (((ax0_ax1_fused_0 * 262144) + (((int)blockIdx.x) * 1024)) + ((int)threadIdx.x));
      A_reindex_ptr[(((ax0_ax1_fused_0 * 262144) + (((int)blockIdx.x) * 1024)) + ((int)threadIdx.x))] = A_ptr[(((ax0_ax1_fused_0 * 262144) + (((int)blockIdx.x) * 1024)) + ((int)threadIdx.x))];
    }
  }
extern "C" __global__ void __launch_bounds__(1024) main_kernel_4(float* __restrict__ A_reindex_reindex_shared_ptr, float* __restrict__ A_reindex_reindex_shared_shared_wmma_accumulator_ptr) {
  for (int ax0_ax1_fused_0 = 0; ax0_ax1_fused_0 < 50; ++ax0_ax1_fused_0) {
    if (((ax0_ax1_fused_0 * 4) + (((int)blockIdx.x) >> 6)) < 197) {
      int cse_v9 = (((ax0_ax1_fused_0 * 262144) + (((int)blockIdx.x) * 1024)) + ((int)threadIdx.x));
      A_reindex_reindex_shared_shared_wmma_accumulator_ptr[(((ax0_ax1_fused_0 * 262144) + (((int)blockIdx.x) * 1024)) + ((int)threadIdx.x))] = A_reindex_reindex_shared_ptr[(((ax0_ax1_fused_0 * 262144) + (((int)blockIdx.x) * 1024)) + ((int)threadIdx.x))];
    }
  }
}

extern "C" __global__ void __launch_bounds__(1024) main_kernel_5(float* __restrict__ A_reindex_ptr, float* __restrict__ A_reindex_reindex_shared_shared_wmma_accumulator_ptr) {
  for (int ax0_ax1_fused_0 = 0; ax0_ax1_fused_0 < 50; ++ax0_ax1_fused_0) {
    if (((ax0_ax1_fused_0 * 4) + (((int)blockIdx.x) >> 6)) < 197) {
      int cse_v10 = (((ax0_ax1_fused_0 * 262144) + (((int)blockIdx.x) * 1024)) + ((int)threadIdx.x));
      A_reindex_ptr[(((ax0_ax1_fused_0 * 262144) + (((int)blockIdx.x) * 1024)) + ((int)threadIdx.x))] = A_reindex_reindex_shared_shared_wmma_accumulator_ptr[(((ax0_ax1_fused_0 * 262144) + (((int)blockIdx.x) * 1024)) + ((int)threadIdx.x))];
    }
  }
}
