// Template: the source text of a kernel file and every header it includes, resolved at load time.
// `#include` is resolved against the including file's folder, the template's folder, the user's include
// dirs (argument and KJIT_INCLUDE_PATH), kernel_templates/ and the CUDA headers; an absolute name is
// that file. The bytes of every resolved header (the CUDA ones included) are held and handed to NVRTC in
// memory, and NVRTC may open no file (compiler.cpp), so the cache key hashes exactly what is compiled.
//
// A header file seen before (the CUDA headers, kjit's own, a library of the user's) is not read again:
// cache::HeaderIndex, kept in the cache root, gives its SHA-256 and includes while its size, times, inode
// and device are the recorded ones. Such a template holds the digests only; with_bytes() reads the bytes
// when something needs them (a compile, a manifest record) and checks them against those digests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kjit/kernel_decl.hpp"

namespace kjit {

struct Header {
  std::string include_name;    // as spelled in #include ("vec.cuh", "cuda_fp16.h")
  std::filesystem::path path;  // where it was found (never hashed)
  std::string bytes;           // empty until loaded when !loaded (see Template::with_bytes)
  bool from_cuda = false;      // found in the CUDA include dirs (kjit's templates are not)
  std::string sha256;          // hex SHA-256 of the bytes (what the digest covers)
  bool loaded = true;          // whether `bytes` holds the header's bytes
};

// Header files of this process's template loads: read (and hashed), or known from the header index.
struct HeaderLoadCounts {
  std::uint64_t read = 0;
  std::uint64_t from_index = 0;
};
HeaderLoadCounts header_load_counts() noexcept;
void reset_header_load_counts() noexcept;

struct Settings;
namespace cache {
class HeaderIndex;
}
// The header index of a cache configuration (cache/header_index.hpp): in its cache_dir, read in every
// cache mode but off (then in memory only), written only in readwrite mode.
std::shared_ptr<cache::HeaderIndex> header_index_for(const Settings& settings);
// The index template loads use: the one given to use_header_index, else header_index_for(settings()).
std::shared_ptr<cache::HeaderIndex> header_index();
// Template loads use `index` from now on (the CLI's --cache-dir, tests); nullptr: back to the default.
void use_header_index(std::shared_ptr<cache::HeaderIndex> index);

class Template : public std::enable_shared_from_this<Template> {
 public:
  // A file. Throws ValueError when it cannot be read.
  static std::shared_ptr<const Template> from_file(const std::filesystem::path& file,
                                                   std::vector<std::filesystem::path> include_dirs = {});
  // Source text; `name` identifies it in messages, metadata and manifests ("my_kernels.cu").
  static std::shared_ptr<const Template> from_string(std::string source, std::string name,
                                                     std::vector<std::filesystem::path> include_dirs = {});
  // Source text with the headers it includes held in memory, by include name (include name -> bytes),
  // e.g. a template rebuilt from a manifest record. Those headers are used before any directory;
  // other includes (the CUDA headers) are resolved as for from_string, except that an include name
  // that is absolute or climbs with ".." resolves only among `headers` (a manifest may come from
  // anywhere: it must not make kjit read files outside its folders).
  // Whatever the template, kjit's templates folder never serves an include name that leaves it.
  // `learned`: include directives compiles learned for its files (learned_includes() of the recorded
  // template), resolved as any learned directive is: never outside its folders.
  static std::shared_ptr<const Template> from_memory(std::string source, std::string name,
                                                     std::map<std::string, std::string> headers,
                                                     std::map<std::string, std::vector<std::string>> learned = {});
  // Source text that kjit generates on top of its own templates (kjit.elementwise): its quoted includes
  // resolve in kjit's templates folder first, as a built-in template's do, so that a header of the same
  // name in the user's include paths (KJIT_INCLUDE_PATH, include_dirs) never replaces kjit's. The digest
  // is the one from_string gives for the same source and headers.
  static std::shared_ptr<const Template> generated(std::string source, std::string name);
  // A built-in template of kernel_templates/ by name ("add_constant"). Names are [A-Za-z0-9_]+.
  static std::shared_ptr<const Template> builtin(const std::string& name);
  // Names of the built-in templates.
  static std::vector<std::string> builtin_names();

  const std::string& name() const noexcept { return name_; }
  bool is_builtin() const noexcept { return builtin_; }
  const std::string& source() const noexcept { return source_; }
  // The headers; a header known from the header index has no bytes here (h.loaded is false).
  const std::vector<Header>& headers() const noexcept { return headers_; }
  // Whether every header's bytes are held (headers() and compile_only_headers()).
  bool holds_bytes() const noexcept { return holds_bytes_; }
  // This template with every header's bytes: itself when it holds them, else a copy (made once) whose
  // bytes are read now and checked against the digests the template was keyed with. Throws kjit::Error
  // when a header cannot be read or changed since the template was loaded (load the template again).
  std::shared_ptr<const Template> with_bytes() const;
  const std::vector<std::string>& unresolved_includes() const noexcept { return unresolved_; }

  // An include NVRTC could not open in a compile of this template: `file` as NVRTC names it in its
  // log (the program name, or a header's include name), `name` the header it asked for. A macro-computed
  // include (`#include __THRUST_DEVICE_SYSTEM_TAG_HEADER`), which no reading of the text can name.
  struct MissingInclude {
    std::string file;
    std::string name;
  };
  // The learned include directives (HeaderIndex::learned) this load applied, by the SHA-256 of the file
  // they belong to: what a manifest records with the template, so that it is rebuilt with the same headers.
  const std::map<std::string, std::vector<std::string>>& learned_includes() const noexcept { return learned_; }
  // The scope its learned directives are kept under in the header index: the digest of the source and
  // the headers its text names (without what compiles learned), the same wherever the template's files
  // are the same (a manifest's rebuilt template included), and another for any other template, so that
  // what one template's compiles learn never re-keys another.
  const std::string& learning_scope() const noexcept { return learning_scope_; }

  // This template loaded again with what a compile learned: each missing name, resolved from the file
  // that asked for it as a quoted include is (that file's folder, then the search path), is handed to
  // NVRTC and hashed from now on. The directives are recorded in the header index (in this template's
  // learning_scope(), by the SHA-256 of the including file's bytes), so that a later load of this
  // template, in this process or another, keys the same headers without compiling. Null when none of them resolves to a
  // header this template does not already hand to NVRTC (then the compile error stands). The result becomes current()
  // for this template.
  std::shared_ptr<const Template> grown_by(const std::vector<MissingInclude>& missing) const;
  // The newest template grown from this one (grown_by), else this one: what a key and a compile of
  // this template use, so that a compile that learned an include is not repeated.
  std::shared_ptr<const Template> current() const;
  // Headers handed to NVRTC in memory besides headers(), not in the digest: a header reached under a
  // second spelling (NVRTC looks in-memory headers up by spelling), and, for a confined template, an
  // #error header for each include name that leaves its folder and is not a recorded header.
  const std::vector<Header>& compile_only_headers() const noexcept { return compile_only_headers_; }
  // A template rebuilt from a manifest (from_memory): it may come from anywhere, so NVRTC must read no
  // file for it. It compiles in a child process that can open no file (compile_sandbox.hpp), with every
  // header, the CUDA ones included, in memory; its program name is a bare file name.
  bool confined() const noexcept { return confined_; }
  const std::vector<KernelDecl>& kernels() const noexcept { return kernels_; }
  // Throws ValueError listing the template's kernels when there is no such kernel.
  const KernelDecl& kernel(const std::string& name) const;
  // Hex SHA-256 over the source and every header (names and the SHA-256 of their bytes): the template's
  // identity.
  const std::string& digest() const noexcept { return digest_; }
  // Process-unique id (for fixed-size in-memory lookup keys).
  std::uint64_t uid() const noexcept { return uid_; }

 private:
  Template() = default;
  // Where a load resolves includes: kept, so that grown_by can load the template again the same way.
  struct Origin {
    bool builtin = false;
    std::filesystem::path base_dir;
    std::vector<std::filesystem::path> include_dirs;  // the user's, KJIT_INCLUDE_PATH's included
    std::map<std::string, std::string> memory_headers;
    bool confined = false;
    std::map<std::string, std::vector<std::string>> learned;  // what grown_by learned, besides the index's
  };
  static std::shared_ptr<const Template> load(std::string source, std::string name, bool builtin,
                                              std::filesystem::path base_dir,
                                              std::vector<std::filesystem::path> include_dirs,
                                              std::map<std::string, std::string> memory_headers = {},
                                              bool confined = false);
  static std::shared_ptr<const Template> load_from(std::string source, std::string name, Origin origin);
  std::string name_;
  bool builtin_ = false;
  std::string source_;
  std::vector<Header> headers_;
  std::vector<Header> compile_only_headers_;
  std::vector<std::string> unresolved_;
  bool confined_ = false;
  std::vector<KernelDecl> kernels_;
  std::string digest_;
  std::uint64_t uid_ = 0;
  bool holds_bytes_ = true;
  std::shared_ptr<const Origin> origin_;
  std::map<std::string, std::vector<std::string>> learned_;
  std::string learning_scope_;
  mutable std::mutex with_bytes_mu_;
  mutable std::shared_ptr<const Template> with_bytes_;
  mutable std::mutex grown_mu_;
  mutable std::shared_ptr<const Template> grown_;
};

// Folder of the built-in templates: KJIT_TEMPLATES_DIR, else the one set by the Python package,
// else the source tree's kernel_templates/.
std::filesystem::path builtin_templates_dir();
void set_builtin_templates_dir(const std::filesystem::path& dir);

}  // namespace kjit
