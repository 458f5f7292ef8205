// nccl_allreduce: builds the gang's NCCL communicator with nccl_bootstrap
// (no MPI, no SSH: the unique id travels through the coordinator), sums a
// buffer across every rank and checks the result. Rank r contributes r + 1
// in every element, so each element must end as n(n+1)/2.
//
// Exit codes: 0 sum correct; 1 wrong sum or a CUDA/NCCL failure; 2 the
// environment is not a gdt nccl job or there is no usable GPU.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "nccl_bootstrap/nccl_bootstrap.h"

namespace {

constexpr size_t kCount = 1 << 20;  // Floats per rank (4 MiB).

bool CudaOk(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "nccl_allreduce: %s: %s\n", what,
               cudaGetErrorString(error));
  return false;
}

}  // namespace

int main() {
  absl::StatusOr<gdt::nccl::Communicator> comm =
      gdt::nccl::BootstrapFromEnvironment();
  if (!comm.ok()) {
    std::fprintf(stderr, "nccl_allreduce: %s\n",
                 std::string(comm.status().message()).c_str());
    return comm.status().code() == absl::StatusCode::kFailedPrecondition ? 2
                                                                         : 1;
  }
  const int rank = comm->rank.rank;
  const int nranks = comm->rank.nranks;
  std::printf(
      "nccl_allreduce: rank %d/%d on device %d: communicator ready after "
      "%lld ms (%d root%s)\n",
      rank, nranks, comm->device,
      static_cast<long long>(comm->ready_after.count()), comm->nroots,
      comm->nroots == 1 ? "" : "s");

  std::vector<float> host(kCount, static_cast<float>(rank + 1));
  float* device = nullptr;
  cudaStream_t stream = nullptr;
  int code = 1;
  if (CudaOk(cudaMalloc(&device, kCount * sizeof(float)), "cudaMalloc") &&
      CudaOk(cudaStreamCreate(&stream), "cudaStreamCreate") &&
      CudaOk(cudaMemcpy(device, host.data(), kCount * sizeof(float),
                        cudaMemcpyHostToDevice),
             "cudaMemcpy to device")) {
    const ncclResult_t result = ncclAllReduce(device, device, kCount, ncclFloat,
                                              ncclSum, comm->comm, stream);
    if (result != ncclSuccess) {
      std::fprintf(stderr, "nccl_allreduce: ncclAllReduce: %s\n",
                   ncclGetErrorString(result));
    } else if (CudaOk(cudaStreamSynchronize(stream), "cudaStreamSynchronize") &&
               CudaOk(cudaMemcpy(host.data(), device, kCount * sizeof(float),
                                 cudaMemcpyDeviceToHost),
                      "cudaMemcpy to host")) {
      const float expected = static_cast<float>(nranks) * (nranks + 1) / 2;
      size_t wrong = 0;
      for (float value : host) wrong += value != expected ? 1 : 0;
      if (wrong == 0) {
        std::printf(
            "nccl_allreduce: rank %d: sum %.0f correct in all %zu "
            "elements\n",
            rank, expected, kCount);
        code = 0;
      } else {
        std::fprintf(stderr,
                     "nccl_allreduce: rank %d: %zu of %zu elements differ "
                     "from %.0f (first %.1f)\n",
                     rank, wrong, kCount, expected, host[0]);
      }
    }
  }
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (device != nullptr) cudaFree(device);
  ncclCommDestroy(comm->comm);
  return code;
}
