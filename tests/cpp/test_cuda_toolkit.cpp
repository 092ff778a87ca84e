// Where kjit finds the CUDA headers, CCCL (CUB / thrust / libcu++) and CUTLASS / CuTe: discovery over fake
// toolkit roots built in a temp dir with the real layouts and version headers of CUDA 12, CUDA 13, the pip
// `nvidia` packages and pip's nvidia-cutlass.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kjit/cuda_toolkit.hpp"
#include "kjit/error.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using kjit::CudaToolkit;
using kjit::discover_cuda_toolkit;
using kjit::LibraryFolder;
using kjit::testing::TempDir;
using kjit::testing::write_file;

using Paths = std::vector<fs::path>;

// <root>/include/cuda_fp16.h: what makes a root the toolkit's headers.
void add_cuda_headers(const fs::path& root) { write_file(root / "include" / "cuda_fp16.h", "// cuda_fp16.h\n"); }

// CCCL as CUDA ships it, in `include_dir`: libcu++'s CCCL_VERSION (MMMmmmppp) and CUB_VERSION (MMMmmmpp).
void add_cccl(const fs::path& include_dir, int major, int minor, int patch) {
  write_file(include_dir / "cuda" / "std" / "__cccl" / "version.h",
             "#ifndef __CCCL_VERSION_H\n#define __CCCL_VERSION_H\n\n#define CCCL_VERSION " +
                 std::to_string(major * 1000000 + minor * 1000 + patch) +
                 "\n#define CCCL_MAJOR_VERSION (CCCL_VERSION / 1000000)\n#endif\n");
  write_file(include_dir / "cub" / "version.cuh",
             "#pragma once\n#define CUB_VERSION " + std::to_string(major * 100000 + minor * 100 + patch) +
                 " // macro expansion with ## requires this to be a single value\n");
  write_file(include_dir / "thrust" / "version.h", "#pragma once\n");
}

// CUTLASS as nvidia-cutlass ships it (cutlass_library/source/include): cutlass/version.h and cute/.
void add_cutlass(const fs::path& include_dir, int major, int minor, int patch) {
  write_file(include_dir / "cutlass" / "version.h",
             "#pragma once\n#include <cstdint>\n#define CUTLASS_MAJOR " + std::to_string(major) +
                 "\n#define CUTLASS_MINOR " + std::to_string(minor) + "\n#define CUTLASS_PATCH " +
                 std::to_string(patch) +
                 " \n#define CUTLASS_VERSION ((CUTLASS_MAJOR)*100 + (CUTLASS_MINOR)*10 + CUTLASS_PATCH)\n");
  write_file(include_dir / "cute" / "tensor.hpp", "#pragma once\n");
}

TEST(CudaToolkitCccl, Cuda13KeepsCcclInIncludeCccl) {
  TempDir t{"kjit-tk"};
  const fs::path root = t / "cuda-13.0";
  add_cuda_headers(root);
  add_cccl(root / "include" / "cccl", 3, 0, 1);
  CudaToolkit tk = discover_cuda_toolkit({root});
  EXPECT_EQ(tk.include_dirs, (Paths{root / "include", root / "include" / "cccl"}));
  ASSERT_TRUE(tk.cccl.found());
  EXPECT_EQ(tk.cccl.include_dir, root / "include" / "cccl");
  EXPECT_EQ(tk.cccl.version, "3.0.1");
  EXPECT_EQ(tk.cccl.from, root.string());
}

TEST(CudaToolkitCccl, Cuda12KeepsCcclDirectlyInInclude) {
  TempDir t{"kjit-tk"};
  const fs::path root = t / "cuda-12.9";
  add_cuda_headers(root);
  add_cccl(root / "include", 2, 8, 2);
  CudaToolkit tk = discover_cuda_toolkit({root});
  EXPECT_EQ(tk.include_dirs, (Paths{root / "include"}));  // no second folder: cub/ is beside cuda_fp16.h
  ASSERT_TRUE(tk.cccl.found());
  EXPECT_EQ(tk.cccl.include_dir, root / "include");
  EXPECT_EQ(tk.cccl.version, "2.8.2");
}

TEST(CudaToolkitCccl, OlderCcclWithoutCcclVersionIsReadFromCub) {
  TempDir t{"kjit-tk"};
  const fs::path root = t / "cuda-12.0";
  add_cuda_headers(root);
  write_file(root / "include" / "cub" / "version.cuh", "#define CUB_VERSION 200001\n");
  CudaToolkit tk = discover_cuda_toolkit({root});
  ASSERT_TRUE(tk.cccl.found());
  EXPECT_EQ(tk.cccl.version, "2.0.1");
}

TEST(CudaToolkitCccl, UnreadableVersionIsUnknownNotMissing) {
  TempDir t{"kjit-tk"};
  const fs::path root = t / "cuda";
  add_cuda_headers(root);
  write_file(root / "include" / "cccl" / "cuda" / "std" / "__cccl" / "version.h", "#define CCCL_VERSION FOO\n");
  CudaToolkit tk = discover_cuda_toolkit({root});
  ASSERT_TRUE(tk.cccl.found());
  EXPECT_EQ(tk.cccl.version, "unknown");
  EXPECT_EQ(tk.include_dirs, (Paths{root / "include", root / "include" / "cccl"}));
}

TEST(CudaToolkitCccl, NoCcclAnywhere) {
  TempDir t{"kjit-tk"};
  const fs::path root = t / "cuda";
  add_cuda_headers(root);
  CudaToolkit tk = discover_cuda_toolkit({root, t / "missing"});
  EXPECT_FALSE(tk.cccl.found());
  EXPECT_EQ(tk.include_dirs, (Paths{root / "include"}));
}

// A system toolkit gives cuda_fp16.h but has no CCCL; the pip CUDA 12 packages registered after it (a root
// each: nvidia/cuda_runtime, nvidia/cuda_cccl) give CCCL, appended after the toolkit's include/.
TEST(CudaToolkitCccl, SystemToolkitWithoutCcclTakesItFromALaterRoot) {
  TempDir t{"kjit-tk"};
  const fs::path system = t / "usr-local-cuda";
  const fs::path runtime = t / "site-packages" / "nvidia" / "cuda_runtime";
  const fs::path cccl = t / "site-packages" / "nvidia" / "cuda_cccl";
  add_cuda_headers(system);
  add_cuda_headers(runtime);
  add_cccl(cccl / "include", 2, 8, 2);
  CudaToolkit tk = discover_cuda_toolkit({system, runtime, cccl});
  EXPECT_EQ(tk.headers_from, system.string());
  EXPECT_EQ(tk.include_dirs, (Paths{system / "include", cccl / "include"}));  // the toolkit's include/ first
  ASSERT_TRUE(tk.cccl.found());
  EXPECT_EQ(tk.cccl.from, cccl.string());
  EXPECT_EQ(tk.cccl.version, "2.8.2");
}

// No system toolkit: the pip CUDA 13 packages share one root, nvidia/cu13, CCCL in include/cccl.
TEST(CudaToolkitCccl, PipCuda13RootGivesHeadersAndCccl) {
  TempDir t{"kjit-tk"};
  const fs::path cu13 = t / "site-packages" / "nvidia" / "cu13";
  add_cuda_headers(cu13);
  add_cccl(cu13 / "include" / "cccl", 3, 0, 0);
  CudaToolkit tk = discover_cuda_toolkit({t / "usr-local-cuda", cu13});
  EXPECT_EQ(tk.headers_from, cu13.string());
  EXPECT_EQ(tk.include_dirs, (Paths{cu13 / "include", cu13 / "include" / "cccl"}));
  EXPECT_EQ(tk.cccl.from, cu13.string());
  EXPECT_EQ(tk.cccl.version, "3.0.0");
}

// The toolkit's own CCCL wins over a pip one registered later, whatever their versions.
TEST(CudaToolkitCccl, TheHeadersRootsOwnCcclWins) {
  TempDir t{"kjit-tk"};
  const fs::path system = t / "usr-local-cuda";
  const fs::path cu13 = t / "site-packages" / "nvidia" / "cu13";
  add_cuda_headers(system);
  add_cccl(system / "include" / "cccl", 3, 0, 1);
  add_cuda_headers(cu13);
  add_cccl(cu13 / "include" / "cccl", 3, 5, 0);
  CudaToolkit tk = discover_cuda_toolkit({system, cu13});
  EXPECT_EQ(tk.include_dirs, (Paths{system / "include", system / "include" / "cccl"}));
  EXPECT_EQ(tk.cccl.version, "3.0.1");
  EXPECT_EQ(tk.cccl.from, system.string());
}

// A root before the headers' root that holds only CCCL still comes after the toolkit's include/.
TEST(CudaToolkitCccl, ToolkitIncludeStaysFirst) {
  TempDir t{"kjit-tk"};
  const fs::path cccl_only = t / "cccl";
  const fs::path system = t / "usr-local-cuda";
  add_cccl(cccl_only / "include", 3, 1, 0);
  add_cuda_headers(system);
  CudaToolkit tk = discover_cuda_toolkit({cccl_only, system});
  EXPECT_EQ(tk.include_dirs, (Paths{system / "include", cccl_only / "include"}));
  EXPECT_EQ(tk.cccl.version, "3.1.0");
}

TEST(CudaToolkitCutlass, RegisteredFolderIsAppendedLastWithItsVersion) {
  TempDir t{"kjit-tk"};
  const fs::path system = t / "usr-local-cuda";
  const fs::path cutlass = t / "site-packages" / "cutlass_library" / "source" / "include";
  add_cuda_headers(system);
  add_cccl(system / "include" / "cccl", 3, 0, 1);
  add_cutlass(cutlass, 4, 2, 0);
  CudaToolkit tk = discover_cuda_toolkit({system}, {}, {LibraryFolder{cutlass, "pip nvidia-cutlass"}});
  EXPECT_EQ(tk.include_dirs, (Paths{system / "include", system / "include" / "cccl", cutlass}));
  ASSERT_TRUE(tk.cutlass.found());
  EXPECT_EQ(tk.cutlass.include_dir, cutlass);
  EXPECT_EQ(tk.cutlass.version, "4.2.0");
  EXPECT_EQ(tk.cutlass.from, "pip nvidia-cutlass");
}

TEST(CudaToolkitCutlass, NoneRegisteredIsNotFound) {
  TempDir t{"kjit-tk"};
  add_cuda_headers(t / "cuda");
  CudaToolkit tk = discover_cuda_toolkit({t / "cuda"});
  EXPECT_FALSE(tk.cutlass.found());
  EXPECT_TRUE(tk.cutlass.version.empty());
}

TEST(CudaToolkitCutlass, AFolderWithoutCuteIsNotCutlass) {
  TempDir t{"kjit-tk"};
  write_file(t / "inc" / "cutlass" / "version.h", "#define CUTLASS_MAJOR 4\n");
  EXPECT_FALSE(kjit::cutlass_in(t / "inc").has_value());
  add_cuda_headers(t / "cuda");
  CudaToolkit tk = discover_cuda_toolkit({t / "cuda"}, {}, {LibraryFolder{t / "inc", "test"}});
  EXPECT_FALSE(tk.cutlass.found());
  EXPECT_EQ(tk.include_dirs, (Paths{t / "cuda" / "include"}));
}

TEST(CudaToolkitCutlass, TheFirstRegisteredWins) {
  TempDir t{"kjit-tk"};
  add_cuda_headers(t / "cuda");
  add_cutlass(t / "a", 3, 8, 0);
  add_cutlass(t / "b", 4, 2, 1);
  CudaToolkit tk =
      discover_cuda_toolkit({t / "cuda"}, {}, {LibraryFolder{t / "a", "first"}, LibraryFolder{t / "b", "second"}});
  EXPECT_EQ(tk.cutlass.version, "3.8.0");
  EXPECT_EQ(tk.cutlass.from, "first");
  EXPECT_EQ(tk.include_dirs, (Paths{t / "cuda" / "include", t / "a", t / "b"}));
}

TEST(CudaToolkitCutlass, RegisteringAFolderWithoutCutlassSaysWhatWasExpected) {
  TempDir t{"kjit-tk"};
  write_file(t / "include" / "other.h", "");
  try {
    kjit::register_cutlass_dir(t / "include", "test");
    FAIL() << "no error";
  } catch (const kjit::ValueError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((t / "include").string()), std::string::npos) << what;
    EXPECT_NE(what.find("cutlass/version.h and cute/"), std::string::npos) << what;
    EXPECT_NE(what.find("cutlass_library/source/include"), std::string::npos) << what;
  }
}

TEST(CudaToolkitCutlass, RegisteringAfterDiscoveryIsRefused) {
  TempDir t{"kjit-tk"};
  add_cutlass(t / "include", 4, 2, 0);
  (void)kjit::cuda_toolkit();
  EXPECT_FALSE(kjit::register_cutlass_dir(t / "include", "test"));
  EXPECT_FALSE(kjit::cuda_toolkit().cutlass.found());
}

}  // namespace
