#include "kjit/template.hpp"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>

#include <sys/stat.h>

#include "kjit/cache/file_read.hpp"
#include "kjit/cache/header_index.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/cuda_toolkit.hpp"
#include "kjit/error.hpp"
#include "kjit/phase_time.hpp"
#include "kjit/settings.hpp"
#include "text_scan.hpp"

#ifndef KJIT_SOURCE_TEMPLATES_DIR
#define KJIT_SOURCE_TEMPLATES_DIR ""
#endif

namespace kjit {
namespace fs = std::filesystem;

namespace {

std::mutex& dir_mu() {
  static std::mutex m;
  return m;
}
fs::path& configured_dir() {
  static fs::path d;
  return d;
}

bool read_file(const fs::path& p, std::string& out) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  if (!f) return false;
  const std::streamoff size = f.tellg();
  if (size < 0) return false;
  out.resize(static_cast<std::size_t>(size));
  f.seekg(0);
  return static_cast<bool>(f.read(out.data(), size)) || size == 0;
}

// No header is anywhere near this big (cuda_fp16.hpp is 0.2 MB); a bigger file is refused.
constexpr std::uint64_t kMaxHeaderBytes = 256ull << 20;

std::atomic<std::uint64_t> g_read{0}, g_from_index{0};

std::mutex& index_mu() {
  static std::mutex m;
  return m;
}
std::shared_ptr<cache::HeaderIndex>& index_slot() {
  static std::shared_ptr<cache::HeaderIndex> p;
  return p;
}

struct IncludeDirective {
  std::string name;
  bool angled;
  // Named by a compile, not by the file's text (a macro-computed include: HeaderIndex::learned). Its
  // name never climbs out of the folder it is resolved in, even from a CUDA header (whose written
  // "../x" includes do): the macro may be the template's.
  bool computed = false;
};

// The literal names a line probes with __has_include / __has_include_next, or with a macro of CCCL's
// kind that wraps it (_CCCL_HAS_INCLUDE(<x>): any identifier ending in HAS_INCLUDE). NVRTC answers a
// probe from the headers handed to it: each probed header that exists is handed too, so that it
// answers as it would with the file system (CCCL enables its __half support on
// _CCCL_HAS_INCLUDE(<cuda_fp16.h>)). A probe of a macro is not seen (NVRTC answers it "absent").
void probed_names(std::string_view line, std::vector<IncludeDirective>& out) {
  for (std::size_t from = 0;;) {
    const std::size_t lower = line.find("__has_include", from), upper = line.find("HAS_INCLUDE", from);
    const std::size_t at = std::min(lower, upper);
    if (at == std::string_view::npos) return;
    from = at + 1;
    std::string_view s = line.substr(at + (at == lower ? 13 : 11));
    if (at == lower && text::starts_with(s, "_next")) s.remove_prefix(5);
    s = text::skip_blanks(s);
    if (s.empty() || s.front() != '(') continue;
    s = text::skip_blanks(s.substr(1));
    if (s.empty() || (s.front() != '<' && s.front() != '"')) continue;
    const std::size_t end = s.find(s.front() == '<' ? '>' : '"', 1);
    if (end == std::string_view::npos || end == 1) continue;
    out.push_back({std::string(s.substr(1, end - 1)), s.front() == '<'});
  }
}

// An include name that is absolute or has a ".." part reaches outside whatever folder it is resolved in.
bool leaves_its_folder(const std::string& include_name) { return !cache::layout::stays_inside(include_name); }

// The source with every backslash-newline removed (translation phase 2), so that a directive continued
// over several lines is seen whole.
std::string joined_lines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  std::size_t from = 0;  // copied up to here; whole runs between splices, not one char at a time
  for (std::size_t at = source.find('\\'); at != std::string::npos; at = source.find('\\', at + 1)) {
    std::size_t j = at + 1;
    if (j < source.size() && source[j] == '\r') ++j;
    if (j < source.size() && source[j] == '\n') {
      out.append(source, from, at - from);
      from = j + 1;
      at = j;
    }
  }
  out.append(source, from, std::string::npos);
  return out;
}

// Whether a line's __has_include / __has_include_next probes a name outside its folder, or one this
// scanner cannot read (a macro).
bool probes_outside(std::string_view line) {
  for (std::size_t at = line.find("__has_include"); at != std::string_view::npos;
       at = line.find("__has_include", at + 1)) {
    std::string_view s = line.substr(at + 13);
    if (text::starts_with(s, "_next")) s.remove_prefix(5);
    s = text::skip_blanks(s);
    if (s.empty() || s.front() != '(') return true;
    s = text::skip_blanks(s.substr(1));
    if (s.empty() || (s.front() != '<' && s.front() != '"')) return true;
    const std::size_t end = s.find(s.front() == '<' ? '>' : '"', 1);
    if (end == std::string_view::npos || leaves_its_folder(std::string(s.substr(1, end - 1)))) return true;
  }
  return false;
}

// #include directives of a file (all of them, whatever the surrounding #if says: over-approximates).
// `unparsed` (when given) collects directive lines that mention "include" in a form this scanner does
// not read (a macro, a comment inside the directive, include_next): NVRTC would still follow them; and
// lines whose __has_include probes a name outside its folder (or one it cannot read): an oracle for
// whether a file exists.
std::vector<IncludeDirective> scan_includes(const std::string& source, std::vector<std::string>* unparsed = nullptr) {
  std::vector<IncludeDirective> out;
  const std::string text = joined_lines(source);
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    std::string_view s = text::skip_blanks(line);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (unparsed && line.find("__has_include") != std::string_view::npos && probes_outside(line))
      unparsed->push_back(std::string(line));
    if (line.find("HAS_INCLUDE") != std::string_view::npos || line.find("__has_include") != std::string_view::npos)
      probed_names(line, out);
    if (text::starts_with(s, "#"))
      s.remove_prefix(1);
    else if (text::starts_with(s, "%:"))
      s.remove_prefix(2);  // the digraph of '#'
    else
      continue;
    s = text::skip_blanks(s);
    // An include directive this scanner may not read right: include_next, a macro, a comment before it.
    const bool maybe_include = text::starts_with(s, "include") ||
                               (text::starts_with(s, "/*") && line.find("include") != std::string_view::npos);
    std::size_t end = std::string_view::npos;
    char close = 0;
    if (text::starts_with(s, "include")) {
      s = text::skip_blanks(s.substr(7));
      if (!s.empty() && (s.front() == '<' || s.front() == '"')) {
        close = s.front() == '<' ? '>' : '"';
        end = s.find(close, 1);
      }
    }
    if (end == std::string_view::npos || end == 1) {
      if (maybe_include && unparsed) unparsed->push_back(std::string(line));
      continue;
    }
    out.push_back({std::string(s.substr(1, end - 1)), close == '>'});
  }
  return out;
}

class IncludeResolver {
 public:
  // `confined`: the template's headers are all in `memory_headers` (a template rebuilt from a manifest,
  // which may come from anywhere): a name that leaves its folder resolves only among them.
  // `learned`: include directives compiles learned for this template (sha256 of a file's bytes ->
  // directives: the header index's for its scope, and its origin's).
  IncludeResolver(fs::path base_dir, std::vector<fs::path> user_dirs, std::vector<fs::path> cuda_dirs,
                  const std::map<std::string, std::string>& memory_headers, bool confined, cache::HeaderIndex& index,
                  const std::map<std::string, std::vector<std::string>>& learned)
      : index_(index),
        learned_(learned),
        base_dir_(std::move(base_dir)),
        user_dirs_(std::move(user_dirs)),
        cuda_dirs_(std::move(cuda_dirs)),
        memory_(memory_headers),
        confined_(confined) {}

  void run(const std::string& root_text) { visit(root_text, base_dir_, cache::to_hex(cache::Sha256::of(root_text))); }
  std::vector<Header> headers;
  std::vector<std::string> unresolved;
  std::vector<std::pair<std::string, std::size_t>> aliases;  // (include name, index in headers of that file)
  std::map<std::string, std::vector<std::string>> applied;   // the learned directives used, by file SHA-256

 private:
  // The includes of a file that lives in `including_dir`, whose text is `text` (of SHA-256 `sha256`).
  void visit(const std::string& text, const fs::path& including_dir, std::string sha256) {
    std::vector<std::string> unparsed;
    auto includes = scan_includes(text, checks_directives(including_dir) ? &unparsed : nullptr);
    refuse_unparsed(unparsed);
    add_learned(sha256, includes);
    visit_includes(includes, including_dir);
  }
  // The directives compiles of this template learned for a file of these bytes.
  void add_learned(const std::string& sha256, std::vector<IncludeDirective>& includes) {
    auto it = learned_.find(sha256);
    if (it == learned_.end()) return;
    for (const auto& d : it->second)
      if (d.size() > 1) {
        includes.push_back({d.substr(1), d.front() == '<', true});
        auto& list = applied[sha256];
        if (std::find(list.begin(), list.end(), d) == list.end()) list.push_back(d);
      }
  }
  // A confined template may include only plainly named headers (its own files, not the CUDA headers').
  bool checks_directives(const fs::path& including_dir) const { return confined_ && !in_cuda_dirs(including_dir); }
  static void refuse_unparsed(const std::vector<std::string>& unparsed) {
    if (!unparsed.empty())
      throw ValueError(
          "a template rebuilt from a manifest may only include (or probe with __has_include) "
          "headers by a plain \"name\" or <name> inside its folder, and this one has '" +
          unparsed.front() +
          "': kjit will not let it read (or test for) a file it did not record. "
          "Record the template from a source that includes its headers plainly.");
  }
  void visit_includes(const std::vector<IncludeDirective>& includes, const fs::path& including_dir) {
    for (const auto& inc : includes) {
      if (visit_memory(inc.name)) continue;
      // The same directive from the same folder resolves as it did (a header included from many files
      // behind its include guard): nothing new to probe.
      if (!directives_done_
               .insert((inc.computed ? "=" : "") + std::string(inc.angled ? "<" : "\"") + inc.name + '\n' +
                       including_dir.string())
               .second)
        continue;
      std::vector<std::pair<fs::path, bool>> candidates;  // (dir, is_cuda)
      if (!inc.angled) {
        candidates.emplace_back(including_dir, false);
        if (!base_dir_.empty()) candidates.emplace_back(base_dir_, false);
      }
      // The user's folders before kjit's own, so that kjit never shadows a header of the user's.
      for (const auto& d : user_dirs_) candidates.emplace_back(d, false);
      candidates.emplace_back(builtin_dir_, false);
      for (const auto& d : cuda_dirs_) candidates.emplace_back(d, true);
      // kjit's stand-ins for the C++ standard headers NVRTC lacks (<cmath>, <complex>, ...): last, so that
      // a header of the same name anywhere above (the user's own <cmath>) is the one used.
      candidates.emplace_back(std_headers_dir_, false);
      // An absolute name is that file, wherever it is: a CUDA header only when it lies in the CUDA dirs
      // (else KJIT_RECORD would leave it out of a manifest as part of the toolkit).
      if (fs::path(inc.name).is_absolute())
        candidates = {{fs::path("/"), in_cuda_dirs(fs::path(inc.name).parent_path())}};
      // A computed name that leaves its folder is one a confined template never reaches.
      if (inc.computed && confined_ && leaves_its_folder(inc.name)) candidates.clear();
      // kjit's templates folder never serves a name that climbs out of it, nor does any folder for a
      // confined template; the CUDA headers' own "../x" includes resolve as the toolkit wrote them (not
      // a name a macro computed: the macro may be the template's).
      const bool leaves = leaves_its_folder(inc.name) && (inc.computed || !in_cuda_dirs(including_dir));
      bool found = false;
      for (const auto& [dir, is_cuda] : candidates) {
        if (dir.empty()) continue;
        if (leaves && (confined_ || dir == builtin_dir_ || dir == std_headers_dir_ || including_dir == builtin_dir_ ||
                       including_dir == std_headers_dir_))
          continue;
        fs::path p = dir / inc.name;
        struct stat st{};
        if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
        // An including file that lives inside the CUDA dirs keeps its headers there (not a stand-in of kjit's).
        bool cuda = is_cuda || (in_cuda_dirs(including_dir) && dir != std_headers_dir_);
        const std::string canonical = canonical_of(p);
        const std::string canon = canonical.empty() ? p.lexically_normal().string() : canonical;
        found = true;
        if (!seen_files_.insert(canon).second) {
          // The same file under another spelling: NVRTC looks in-memory headers up by spelling.
          auto first = seen_paths_.find(canon);
          if (!seen_names_.count(inc.name) && first != seen_paths_.end()) aliases.push_back({inc.name, first->second});
          break;
        }
        seen_paths_[canon] = headers.size();
        if (!cuda && seen_names_.count(inc.name))
          throw ValueError("two different headers are included as '" + inc.name + "' (" + seen_names_[inc.name] +
                           " and " + p.string() + "); rename one or include it by a distinct path");
        seen_names_[inc.name] = p.string();
        visit_file(inc.name, p, canonical, cuda, st);
        break;
      }
      if (!found && std::find(unresolved.begin(), unresolved.end(), inc.name) == unresolved.end())
        unresolved.push_back(inc.name);
    }
  }
  // The canonical path of a file found at `p` ("" when it cannot be resolved): its folder's, resolved
  // once per load (a template's headers share a few folders: 278 readlink calls per load before), then
  // its name, unless the file itself is a symbolic link.
  std::string canonical_of(const fs::path& p) {
    struct stat lst{};
    std::error_code ec;
    if (::lstat(p.c_str(), &lst) != 0) return {};
    if (S_ISLNK(lst.st_mode)) {
      const fs::path c = fs::weakly_canonical(p, ec);
      return ec ? std::string() : c.string();
    }
    const fs::path dir = p.parent_path();
    auto it = canonical_dirs_.find(dir.string());
    if (it == canonical_dirs_.end()) {
      const fs::path c = fs::weakly_canonical(dir, ec);
      it = canonical_dirs_.emplace(dir.string(), ec ? std::string() : c.string()).first;
    }
    return it->second.empty() ? std::string() : (fs::path(it->second) / p.filename()).string();
  }
  // A header file: its digest and includes from the header index while the file is the one recorded
  // there, else read, hashed and scanned (and recorded).
  void visit_file(const std::string& include_name, const fs::path& p, const std::string& canonical, bool cuda,
                  const struct stat& st) {
    const fs::path dir = p.parent_path();
    // The index vouches only for files nobody edits in place: the CUDA toolkit's and kjit's own templates
    // (header_index.hpp: a write through a shared mapping can keep a file's identity). The user's headers,
    // and a confined template's own files (scanned for the directives it may not use), are always read.
    const bool indexable = !checks_directives(dir) && !canonical.empty() && (cuda || in_kjit_templates(dir));
    Header h{include_name, p, {}, cuda, {}, true};
    if (indexable)
      if (auto facts = index_.find(canonical, cache::FileIdentity::of(st))) {
        std::vector<IncludeDirective> includes;
        for (const auto& e : facts->includes)
          if (e.size() > 1) includes.push_back({e.substr(1), e.front() == '<'});
        h.sha256 = std::move(facts->sha256);
        h.loaded = false;
        ++g_from_index;
        add_learned(h.sha256, includes);
        headers.push_back(std::move(h));
        visit_includes(includes, dir);
        return;
      }
    cache::FileRead r = cache::read_regular_file(p, kMaxHeaderBytes);
    if (!r.ok())
      throw ValueError("cannot read header " + p.string() + " included as '" + include_name + "': " + r.error);
    ++g_read;
    h.bytes = std::move(r.bytes);
    h.sha256 = cache::to_hex(cache::Sha256::of(h.bytes));
    std::vector<std::string> unparsed;
    auto includes = scan_includes(h.bytes, indexable ? nullptr : checks_directives(dir) ? &unparsed : nullptr);
    refuse_unparsed(unparsed);
    if (indexable) {
      cache::HeaderFacts facts{h.sha256, {}};
      for (const auto& inc : includes) facts.includes.push_back((inc.angled ? "<" : "\"") + inc.name);
      index_.remember(canonical, cache::FileIdentity::of(r.st), std::move(facts));
    }
    add_learned(h.sha256, includes);
    headers.push_back(std::move(h));
    visit_includes(includes, dir);
  }
  // A header held in memory (Template::from_memory): found by its include name before any directory.
  bool visit_memory(const std::string& include_name) {
    auto it = memory_.find(include_name);
    if (it == memory_.end()) return false;
    if (!seen_files_.insert("memory:" + include_name).second) return true;
    seen_names_[include_name] = "memory:" + include_name;
    headers.push_back({include_name, fs::path("<memory>") / include_name, it->second, false,
                       cache::to_hex(cache::Sha256::of(it->second)), true});
    visit(it->second, fs::path{}, headers.back().sha256);
    return true;
  }
  // Whether `dir` is a CUDA include dir or lies inside one, by whole path components: <cuda>/include-extra
  // is not inside <cuda>/include.
  bool in_cuda_dirs(const fs::path& dir) const {
    const fs::path d = dir.lexically_normal();
    for (const auto& c : cuda_dirs_) {
      const fs::path cn = c.lexically_normal();
      auto di = d.begin();
      bool inside = true;
      for (auto ci = cn.begin(); ci != cn.end() && inside; ++ci) {
        if (ci->empty() && std::next(ci) == cn.end()) break;  // a trailing '/' of the CUDA dir
        inside = di != d.end() && *di == *ci;
        if (inside) ++di;
      }
      if (inside) return true;
    }
    return false;
  }
  bool in_kjit_templates(const fs::path& dir) const {
    const std::string d = dir.lexically_normal().string(), t = builtin_dir_.lexically_normal().string();
    return !t.empty() && d.rfind(t, 0) == 0 && (d.size() == t.size() || d[t.size()] == '/' || t.back() == '/');
  }
  cache::HeaderIndex& index_;
  const std::map<std::string, std::vector<std::string>>& learned_;
  const fs::path builtin_dir_ = builtin_templates_dir();
  // kernel_templates/std/: a header there is a standard one NVRTC does not ship (docs/header-libraries.md).
  const fs::path std_headers_dir_ = builtin_dir_.empty() ? fs::path() : builtin_dir_ / "std";
  fs::path base_dir_;
  std::vector<fs::path> user_dirs_, cuda_dirs_;
  std::set<std::string> seen_files_;
  std::map<std::string, std::string> canonical_dirs_;  // folder -> its canonical path ("" if unresolved)
  std::set<std::string> directives_done_;              // "<name" / "\"name", '\n', the including folder
  std::map<std::string, std::size_t> seen_paths_;      // canonical path -> index in headers
  std::map<std::string, std::string> seen_names_;
  const std::map<std::string, std::string>& memory_;
  bool confined_;
};

// Hex SHA-256 over the source and every header (its include name and the SHA-256 of its bytes), in
// include-name order: a template's identity (Template::digest).
std::string digest_of(const std::string& source, const std::vector<Header>& headers) {
  std::vector<const Header*> sorted;
  for (const auto& h : headers) sorted.push_back(&h);
  std::sort(sorted.begin(), sorted.end(),
            [](const Header* a, const Header* b) { return a->include_name < b->include_name; });
  cache::Sha256 sha;
  auto field = [&](const std::string& s) {
    std::uint64_t n = s.size();
    sha.update(&n, sizeof n).update(s);
  };
  field(source);
  for (const Header* h : sorted) {
    field(h->include_name);
    field(h->sha256);
  }
  return cache::to_hex(sha.finish());
}

std::atomic<std::uint64_t> g_next_uid{1};

}  // namespace

fs::path builtin_templates_dir() {
  if (const auto& d = settings().templates_dir) return *d;
  std::lock_guard<std::mutex> lock(dir_mu());
  if (!configured_dir().empty()) return configured_dir();
  return KJIT_SOURCE_TEMPLATES_DIR;
}

void set_builtin_templates_dir(const fs::path& dir) {
  std::lock_guard<std::mutex> lock(dir_mu());
  configured_dir() = dir;
}

HeaderLoadCounts header_load_counts() noexcept { return {g_read.load(), g_from_index.load()}; }

void reset_header_load_counts() noexcept {
  g_read = 0;
  g_from_index = 0;
}

std::shared_ptr<cache::HeaderIndex> header_index_for(const Settings& s) {
  // The records hold what this kjit's include scanner found: another version's are not used.
  // Scanner 2: __has_include probes are includes too.
  const std::string tag = std::string("kjit ") + KJIT_VERSION + " scanner 2";
  if (s.cache_mode == CacheMode::Off) return std::make_shared<cache::HeaderIndex>(fs::path{}, false, tag);
  return std::make_shared<cache::HeaderIndex>(s.cache_dir, s.cache_mode == CacheMode::ReadWrite, tag,
                                              std::chrono::seconds(2), s.cache_layers);
}

std::shared_ptr<cache::HeaderIndex> header_index() {
  std::lock_guard<std::mutex> lock(index_mu());
  if (!index_slot()) index_slot() = header_index_for(settings());
  return index_slot();
}

void use_header_index(std::shared_ptr<cache::HeaderIndex> index) {
  std::lock_guard<std::mutex> lock(index_mu());
  index_slot() = std::move(index);
}

std::shared_ptr<const Template> Template::load(std::string source, std::string name, bool builtin, fs::path base_dir,
                                               std::vector<fs::path> include_dirs,
                                               std::map<std::string, std::string> memory_headers, bool confined) {
  Origin o;
  o.builtin = builtin;
  o.base_dir = std::move(base_dir);
  // A template rebuilt from a manifest may come from anyone: it reads none of the user's folders (the
  // name "notes.txt" would otherwise be looked up in KJIT_INCLUDE_PATH and its lines printed in the
  // compile log); only its recorded headers, kjit's templates and the CUDA headers.
  if (!confined)
    for (const auto& d : settings().include_dirs) include_dirs.push_back(d);
  o.include_dirs = std::move(include_dirs);
  o.memory_headers = std::move(memory_headers);
  o.confined = confined;
  return load_from(std::move(source), std::move(name), std::move(o));
}

std::shared_ptr<const Template> Template::load_from(std::string source, std::string name, Origin origin) {
  auto t = std::shared_ptr<Template>(new Template());
  auto o = std::make_shared<const Origin>(std::move(origin));
  t->origin_ = o;
  t->name_ = std::move(name);
  t->builtin_ = o->builtin;
  t->source_ = std::move(source);
  const bool confined = o->confined;
  const CudaToolkit& tk = cuda_toolkit();
  const std::shared_ptr<cache::HeaderIndex> index = header_index();
  // First the headers the text names, whose digest is the scope of what compiles of this template learned
  // (HeaderIndex: a directive one template learned never re-keys another); then, when anything was
  // learned in that scope (or is in the origin: a manifest's record, grown_by), again with it.
  const std::map<std::string, std::vector<std::string>> none;
  std::optional<IncludeResolver> resolver;
  resolver.emplace(o->base_dir, o->include_dirs, tk.include_dirs, o->memory_headers, confined, *index, none);
  resolver->run(t->source_);
  t->learning_scope_ = digest_of(t->source_, resolver->headers);
  std::map<std::string, std::vector<std::string>> learned = index->learned(t->learning_scope_);
  for (const auto& [sha, directives] : o->learned) {
    auto& list = learned[sha];
    for (const auto& d : directives)
      if (std::find(list.begin(), list.end(), d) == list.end()) list.push_back(d);
  }
  if (!learned.empty()) {
    resolver.emplace(o->base_dir, o->include_dirs, tk.include_dirs, o->memory_headers, confined, *index, learned);
    resolver->run(t->source_);
  }
  index->save();
  t->headers_ = std::move(resolver->headers);
  t->unresolved_ = std::move(resolver->unresolved);
  t->learned_ = std::move(resolver->applied);
  t->confined_ = confined;
  t->kernels_ = parse_kernel_decls(t->source_);
  t->digest_ = digest_of(t->source_, t->headers_);
  for (const Header& h : t->headers_) t->holds_bytes_ = t->holds_bytes_ && h.loaded;
  // Not hashed either (the bytes are those of a header above): a header reached under a second spelling
  // is handed to NVRTC under that spelling too, for compiles that see headers only in memory.
  for (const auto& [alias, index] : resolver->aliases) {
    const Header& h = t->headers_[index];
    auto named = [&](const Header& x) { return x.include_name == alias; };
    if (std::none_of(t->headers_.begin(), t->headers_.end(), named) &&
        std::none_of(t->compile_only_headers_.begin(), t->compile_only_headers_.end(), named)) {
      t->compile_only_headers_.push_back(h);
      t->compile_only_headers_.back().include_name = alias;
    }
  }
  if (confined) {
    // Not hashed: the same template loaded from its files (no such names there) must keep its key.
    for (const auto& name : t->unresolved_)
      if (leaves_its_folder(name))
        t->compile_only_headers_.push_back(
            {name,
             fs::path("<blocked>") / name,
             "#error \"kjit: this include is not a header recorded with this template, and a "
             "template rebuilt from a manifest reads no other file outside the CUDA headers\"\n",
             false,
             {},
             true});
  }
  t->uid_ = g_next_uid.fetch_add(1);
  return t;
}

std::shared_ptr<const Template> Template::with_bytes() const {
  if (holds_bytes_) return shared_from_this();
  std::lock_guard<std::mutex> lock(with_bytes_mu_);
  if (with_bytes_) return with_bytes_;
  PhaseTimer timer(Phase::Template);
  auto t = std::shared_ptr<Template>(new Template());
  t->name_ = name_;
  t->builtin_ = builtin_;
  t->source_ = source_;
  t->headers_ = headers_;
  t->compile_only_headers_ = compile_only_headers_;
  t->unresolved_ = unresolved_;
  t->confined_ = confined_;
  t->kernels_ = kernels_;
  t->digest_ = digest_;
  t->uid_ = uid_;
  t->origin_ = origin_;
  t->learned_ = learned_;
  t->learning_scope_ = learning_scope_;
  for (auto* list : {&t->headers_, &t->compile_only_headers_})
    for (Header& h : *list) {
      if (h.loaded) continue;
      cache::FileRead r = cache::read_regular_file(h.path, kMaxHeaderBytes);
      if (!r.ok())
        throw Error("cannot read header " + h.path.string() + " (included as '" + h.include_name + "' by template '" +
                    name_ + "') to compile it: " + r.error +
                    ". It was readable when the template was loaded; "
                    "restore it, or load the template again.");
      if (cache::to_hex(cache::Sha256::of(r.bytes)) != h.sha256) {
        // The header index vouched for bytes that are gone (a file of the toolkit's or kjit's changed in
        // place): its record goes, so that loading the template again reads the file as it is now.
        std::error_code ec;
        const fs::path canonical = fs::weakly_canonical(h.path, ec);
        if (!ec) {
          const std::shared_ptr<cache::HeaderIndex> index = header_index();
          index->forget(canonical.string());
          index->save();
        }
        throw Error("header " + h.path.string() + " (included as '" + h.include_name + "' by template '" + name_ +
                    "') changed after the template was loaded: kjit compiles only the bytes its cache key covers, "
                    "and those are no longer on disk. Load the template again (kjit.Template.from_file, or a new "
                    "process for a built-in op) to compile the header as it is now.");
      }
      h.bytes = std::move(r.bytes);
      h.loaded = true;
    }
  t->holds_bytes_ = true;
  with_bytes_ = t;
  return t;
}

std::shared_ptr<const Template> Template::grown_by(const std::vector<MissingInclude>& missing) const {
  PhaseTimer timer(Phase::Template);
  // The file that asked, by the name NVRTC gave it: the program (Compiler::program_name) or a header.
  auto sha_of = [&](const std::string& file) -> std::string {
    for (const auto* list : {&headers_, &compile_only_headers_})
      for (const auto& h : *list)
        if (h.include_name == file && !h.sha256.empty()) return h.sha256;
    const std::string base = fs::path(name_).filename().string();
    if (file == name_ || file == base || file == name_ + ".cuh") return cache::to_hex(cache::Sha256::of(source_));
    return {};
  };
  Origin o = *origin_;
  std::vector<std::pair<std::string, std::string>> learned;
  for (const auto& m : missing) {
    const std::string sha = sha_of(m.file);
    if (sha.empty() || m.name.empty()) continue;
    const std::string directive = "\"" + m.name;
    auto& list = o.learned[sha];
    if (std::find(list.begin(), list.end(), directive) != list.end()) continue;
    list.push_back(directive);
    learned.emplace_back(sha, directive);
  }
  if (learned.empty()) return nullptr;
  // The headers NVRTC gets, by name; not a confined template's #error stand-ins for names it may not reach.
  auto handed = [](const Template& t) {
    std::set<std::string> names;
    for (const auto* list : {&t.headers_, &t.compile_only_headers_})
      for (const auto& h : *list)
        if (!h.sha256.empty()) names.insert(h.include_name);  // a stand-in has no digest
    return names;
  };
  std::shared_ptr<const Template> grown = load_from(source_, name_, std::move(o));
  const std::set<std::string> before = handed(*this), after = handed(*grown);
  if (std::includes(before.begin(), before.end(), after.begin(), after.end())) return nullptr;  // nothing new
  // Kept where later loads look: a header that resolved is recorded for every load to come.
  const std::shared_ptr<cache::HeaderIndex> index = header_index();
  for (const auto& [sha, directive] : learned) index->learn(learning_scope_, sha, directive);
  index->save();
  std::lock_guard<std::mutex> lock(grown_mu_);
  grown_ = grown;
  return grown;
}

std::shared_ptr<const Template> Template::current() const {
  std::shared_ptr<const Template> t = shared_from_this();
  for (;;) {
    std::shared_ptr<const Template> next;
    {
      std::lock_guard<std::mutex> lock(t->grown_mu_);
      next = t->grown_;
    }
    if (!next) return t;
    t = std::move(next);
  }
}

std::shared_ptr<const Template> Template::from_file(const fs::path& file, std::vector<fs::path> include_dirs) {
  PhaseTimer timer(Phase::Template);
  std::string source;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec) || !read_file(file, source))
    throw ValueError("cannot read template file '" + file.string() +
                     "': it does not exist or is not readable. Pass the path of a .cu/.cuh file.");
  fs::path abs = fs::absolute(file, ec);
  return load(std::move(source), file.filename().string(), false, abs.parent_path(), std::move(include_dirs));
}

std::shared_ptr<const Template> Template::from_string(std::string source, std::string name,
                                                      std::vector<fs::path> include_dirs) {
  PhaseTimer timer(Phase::Template);
  if (name.empty()) name = "<string>";
  return load(std::move(source), std::move(name), false, fs::path{}, std::move(include_dirs));
}

std::shared_ptr<const Template> Template::generated(std::string source, std::string name) {
  PhaseTimer timer(Phase::Template);
  return load(std::move(source), std::move(name), false, builtin_templates_dir(), {});
}

std::shared_ptr<const Template> Template::from_memory(std::string source, std::string name,
                                                      std::map<std::string, std::string> headers,
                                                      std::map<std::string, std::vector<std::string>> learned) {
  PhaseTimer timer(Phase::Template);
  if (name.empty()) name = "<string>";
  Origin o;
  o.memory_headers = std::move(headers);
  o.confined = true;
  o.learned = std::move(learned);
  return load_from(std::move(source), std::move(name), std::move(o));
}

std::shared_ptr<const Template> Template::builtin(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 128;
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  auto available_names = [] {  // only for error messages
    std::string available;
    for (const auto& n : builtin_names()) available += (available.empty() ? "" : ", ") + n;
    return available;
  };
  if (!ok)
    throw ValueError("built-in template name '" + name + "' is not valid: names are letters, digits and '_' (" +
                     "available: " + available_names() + "). For a file of your own use Template.from_file.");
  PhaseTimer timer(Phase::Template);
  fs::path dir = builtin_templates_dir();
  fs::path file = dir / (name + ".cuh");
  std::string source;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec) || !read_file(file, source))
    throw ValueError("there is no built-in template '" + name + "' in " + dir.string() +
                     " (available: " + available_names() + ")");
  return load(std::move(source), name, true, dir, {});
}

std::vector<std::string> Template::builtin_names() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(builtin_templates_dir(), ec))
    if (e.path().extension() == ".cuh" && e.is_regular_file(ec)) {
      std::string stem = e.path().stem().string();
      // Helper headers start with an underscore or live in subfolders; kernels are the rest.
      if (!stem.empty() && stem[0] != '_') out.push_back(stem);
    }
  std::sort(out.begin(), out.end());
  return out;
}

const KernelDecl& Template::kernel(const std::string& name) const {
  for (const auto& k : kernels_)  // by qualified name ("mylib::k") first, then by plain name
    if (k.qualified_name() == name) return k;
  for (const auto& k : kernels_)
    if (k.name == name) return k;
  std::string names;
  for (const auto& k : kernels_) names += (names.empty() ? "" : ", ") + k.qualified_name();
  throw ValueError("template '" + name_ + "' has no __global__ kernel named '" + name +
                   "' (it declares: " + (names.empty() ? std::string("none") : names) + ")");
}

}  // namespace kjit
