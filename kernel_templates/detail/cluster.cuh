// Thread-block clusters (sm_90 and newer): a block's rank in its cluster, the cluster-wide barrier, and
// reads of a peer block's shared memory (distributed shared memory, DSMEM), as inline PTX.
//
// A kernel that uses them declares its cluster shape with __cluster_dims__ and is launched with a grid
// that is a multiple of it. Every thread of every block of the cluster calls sync() the same number of
// times (the barrier is .aligned: a warp calls it together). A block's shared memory may be read by its
// peers only until the block exits: a kernel that reads peers ends with a sync().
#pragma once

namespace kjit_cluster {

// This block's rank in its cluster (0 .. cluster size - 1).
__device__ __forceinline__ unsigned rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

// Every thread of the cluster arrives; writes before it (shared memory included) are visible to the
// reads after it in every block of the cluster.
__device__ __forceinline__ void sync() {
  asm volatile(
      "barrier.cluster.arrive.release.aligned;\n"
      "barrier.cluster.wait.acquire.aligned;\n" ::
          : "memory");
}

// The address of `p` (this block's shared memory) in block `peer`'s shared memory window.
__device__ __forceinline__ unsigned peer_address(const void* p, unsigned peer) {
  unsigned local, remote;
  asm("{\n.reg .u64 a;\ncvta.to.shared.u64 a, %1;\ncvt.u32.u64 %0, a;\n}\n" : "=r"(local) : "l"(p));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(peer));
  return remote;
}

// *p as block `peer` holds it (float or double).
__device__ __forceinline__ float read_peer(const float* p, unsigned peer) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(peer_address(p, peer)) : "memory");
  return v;
}
__device__ __forceinline__ double read_peer(const double* p, unsigned peer) {
  double v;
  asm volatile("ld.shared::cluster.f64 %0, [%1];\n" : "=d"(v) : "r"(peer_address(p, peer)) : "memory");
  return v;
}

}  // namespace kjit_cluster
