// Interleaved RGB (uint8, H x W x 3, batch of images along gridDim.z) to one gray channel (H x W),
// BT.601 weights in 8-bit fixed point: gray = (77 R + 150 G + 29 B + 128) >> 8.
// The image size is specialized; launch with a 2-D grid covering W x H and gridDim.z = batch.
#pragma once

template <int H, int W>
__global__ void rgb_to_gray(const unsigned char* __restrict__ rgb, unsigned char* __restrict__ gray) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= W || y >= H) return;
  const long long pixel = static_cast<long long>(blockIdx.z) * H * W + static_cast<long long>(y) * W + x;
  const unsigned char* p = rgb + pixel * 3;
  const unsigned v = 77u * p[0] + 150u * p[1] + 29u * p[2] + 128u;
  gray[pixel] = static_cast<unsigned char>(v >> 8);
}
