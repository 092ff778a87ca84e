// NvrtcJob: everything one NVRTC compilation needs (source, in-memory headers, flags, name expression),
// run in this process or in a child process (compile_sandbox.hpp), with a plain result that crosses a
// pipe: NVRTC's status, log, lowered name and output bytes. Throwing and message-making stay in compiler.cpp.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kjit {

struct NvrtcJob {
  std::string source;
  std::string program_name;
  std::vector<std::pair<std::string, std::string>> headers;  // include name -> bytes, given in memory
  // The compile's own flags (options, macros, version flags): never the PCH's, which nvrtc_flags() adds.
  std::vector<std::string> flags;
  std::string name_expression;
  bool want_cubin = true;  // else PTX
  // NVRTC's automatic precompiled header (flags --pch --pch-dir=<this>): the one folder where NVRTC may
  // write and read files, in this process only (run_nvrtc_without_files). Never sent to a compile child
  // (encode() carries `flags`, which hold no PCH flag).
  std::string pch_dir;

  // What NVRTC is handed: `flags`, then --pch --pch-dir=<pch_dir> when pch_dir is set. The one place the
  // PCH flags are written, so that dropping the PCH is clearing pch_dir, never a search of the flags.
  std::vector<std::string> nvrtc_flags() const;
  // This job with NVRTC's automatic precompiled header in `dir` (an empty `dir`: without it), and
  // without it (pch_dir empty: NVRTC gets no PCH flag).
  NvrtcJob with_pch(const std::string& dir) const;
  NvrtcJob without_pch() const;
};

struct NvrtcOutcome {
  int status = 0;           // nvrtcResult of the compile (0: success)
  std::string failed_call;  // the NVRTC call that failed, when not the compile itself
  std::string status_text;  // nvrtcGetErrorString(status)
  std::string log;
  std::string lowered_name;
  std::string payload;       // cubin or PTX
  std::string sandbox_note;  // set by a child that was asked to forbid file access and could not
  bool ok() const noexcept { return status == 0; }
};

// Runs the job with the process's NVRTC (loads it). Never throws for an NVRTC failure: the outcome says.
NvrtcOutcome run_nvrtc(const NvrtcJob& job);

// The bytes of a job or an outcome on a pipe and back (length-prefixed fields), between a compile
// child and its parent. `decode` returns false for anything short or malformed (a peer that died mid-write).
std::string encode(const NvrtcJob& job);
bool decode(const std::string& bytes, NvrtcJob& job);
std::string encode(const NvrtcOutcome& outcome);
bool decode(const std::string& bytes, NvrtcOutcome& outcome);

}  // namespace kjit
