#include "kjit/nvrtc_job.hpp"

#include <cstdint>
#include <cstring>

#include "kjit/nvrtc_library.hpp"

namespace kjit {

std::vector<std::string> NvrtcJob::nvrtc_flags() const {
  std::vector<std::string> out = flags;
  if (!pch_dir.empty()) {
    out.push_back("--pch");
    out.push_back("--pch-dir=" + pch_dir);
  }
  return out;
}

NvrtcJob NvrtcJob::with_pch(const std::string& dir) const {
  NvrtcJob out = *this;
  out.pch_dir = dir;
  return out;
}

NvrtcJob NvrtcJob::without_pch() const { return with_pch(""); }

NvrtcOutcome run_nvrtc(const NvrtcJob& job) {
  const NvrtcLibrary& lib = NvrtcLibrary::get();
  NvrtcOutcome out;
  auto failed = [&](nvrtcResult r, const char* call) {
    if (r == NVRTC_SUCCESS) return false;
    out.status = static_cast<int>(r);
    out.status_text = lib.nvrtcGetErrorString(r);
    out.failed_call = call;
    return true;
  };
  std::vector<const char*> contents, names;
  for (const auto& [name, bytes] : job.headers) {
    names.push_back(name.c_str());
    contents.push_back(bytes.c_str());
  }
  nvrtcProgram prog = nullptr;
  if (failed(lib.nvrtcCreateProgram(&prog, job.source.c_str(), job.program_name.c_str(),
                                    static_cast<int>(job.headers.size()), contents.data(), names.data()),
             "nvrtcCreateProgram"))
    return out;
  struct Destroy {
    const NvrtcLibrary& lib;
    nvrtcProgram* p;
    ~Destroy() { lib.nvrtcDestroyProgram(p); }
  } destroy{lib, &prog};
  if (failed(lib.nvrtcAddNameExpression(prog, job.name_expression.c_str()), "nvrtcAddNameExpression")) return out;
  const std::vector<std::string> flags = job.nvrtc_flags();
  std::vector<const char*> argv;
  for (const auto& f : flags) argv.push_back(f.c_str());
  const nvrtcResult r = lib.nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  std::size_t n = 0;
  if (lib.nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n > 1) {
    out.log.assign(n, '\0');
    if (lib.nvrtcGetProgramLog(prog, out.log.data()) == NVRTC_SUCCESS)
      out.log.resize(n - 1);
    else
      out.log.clear();
  }
  if (!job.pch_dir.empty() && lib.nvrtcGetPCHCreateStatus && lib.nvrtcGetPCHHeapSizeRequired &&
      lib.nvrtcSetPCHHeapSize && lib.nvrtcGetPCHCreateStatus(prog) == NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED) {
    // The PCH did not fit NVRTC's heap (256 MiB by default; CuTe's needs ~470 MiB): the next compile of
    // this header set makes it in a heap of the size it needs.
    std::size_t need = 0;
    if (lib.nvrtcGetPCHHeapSizeRequired(prog, &need) == NVRTC_SUCCESS && need > 0) lib.nvrtcSetPCHHeapSize(need);
  }
  if (r != NVRTC_SUCCESS) {
    out.status = static_cast<int>(r);
    out.status_text = lib.nvrtcGetErrorString(r);
    return out;
  }
  const char* lowered = nullptr;
  if (failed(lib.nvrtcGetLoweredName(prog, job.name_expression.c_str(), &lowered), "nvrtcGetLoweredName")) return out;
  out.lowered_name = lowered ? lowered : "";
  std::size_t size = 0;
  if (job.want_cubin) {
    if (failed(lib.nvrtcGetCUBINSize(prog, &size), "nvrtcGetCUBINSize")) return out;
    out.payload.resize(size);
    if (failed(lib.nvrtcGetCUBIN(prog, out.payload.data()), "nvrtcGetCUBIN")) return out;
  } else {
    if (failed(lib.nvrtcGetPTXSize(prog, &size), "nvrtcGetPTXSize")) return out;
    out.payload.resize(size);
    if (failed(lib.nvrtcGetPTX(prog, out.payload.data()), "nvrtcGetPTX")) return out;
  }
  return out;
}

namespace {
void put(std::string& out, const std::string& field) {
  const std::uint64_t n = field.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out += field;
}
bool take(const std::string& in, std::size_t& at, std::string& field) {
  std::uint64_t n = 0;
  if (in.size() - at < sizeof n) return false;
  std::memcpy(&n, in.data() + at, sizeof n);
  at += sizeof n;
  if (in.size() - at < n) return false;
  field.assign(in, at, n);
  at += n;
  return true;
}
}  // namespace

std::string encode(const NvrtcOutcome& o) {
  std::string out;
  put(out, std::to_string(o.status));
  for (const std::string* f : {&o.failed_call, &o.status_text, &o.log, &o.lowered_name, &o.payload, &o.sandbox_note})
    put(out, *f);
  return out;
}

std::string encode(const NvrtcJob& j) {
  std::string out;
  for (const std::string* f : {&j.source, &j.program_name, &j.name_expression}) put(out, *f);
  put(out, j.want_cubin ? "1" : "0");
  put(out, std::to_string(j.headers.size()));
  for (const auto& [name, bytes] : j.headers) {
    put(out, name);
    put(out, bytes);
  }
  put(out, std::to_string(j.flags.size()));
  for (const auto& f : j.flags) put(out, f);
  return out;
}

namespace {
// A count written by encode(): decimal digits only, and no more than the bytes left could hold.
bool take_count(const std::string& in, std::size_t& at, std::size_t& n) {
  std::string text;
  if (!take(in, at, text) || text.empty() || text.size() > 9) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  n = static_cast<std::size_t>(std::stoul(text));
  return n <= (in.size() - at) / sizeof(std::uint64_t);
}
}  // namespace

bool decode(const std::string& bytes, NvrtcJob& j) {
  std::size_t at = 0, n = 0;
  std::string cubin;
  for (std::string* f : {&j.source, &j.program_name, &j.name_expression, &cubin})
    if (!take(bytes, at, *f)) return false;
  if (cubin != "0" && cubin != "1") return false;
  j.want_cubin = cubin == "1";
  if (!take_count(bytes, at, n)) return false;
  j.headers.assign(n, {});
  for (auto& [name, content] : j.headers)
    if (!take(bytes, at, name) || !take(bytes, at, content)) return false;
  if (!take_count(bytes, at, n)) return false;
  j.flags.assign(n, {});
  for (auto& f : j.flags)
    if (!take(bytes, at, f)) return false;
  return at == bytes.size();
}

bool decode(const std::string& bytes, NvrtcOutcome& o) {
  std::size_t at = 0;
  std::string status;
  if (!take(bytes, at, status) || status.empty() || status.size() > 4) return false;
  for (char c : status)
    if (c < '0' || c > '9') return false;
  o.status = std::stoi(status);
  for (std::string* f : {&o.failed_call, &o.status_text, &o.log, &o.lowered_name, &o.payload, &o.sandbox_note})
    if (!take(bytes, at, *f)) return false;
  return at == bytes.size();
}

}  // namespace kjit
