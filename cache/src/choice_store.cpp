#include "kjit/cache/choice_store.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "kjit/cache/atomic_file.hpp"
#include "kjit/cache/file_lock.hpp"
#include "kjit/cache/file_read.hpp"
#include "kjit/cache/layout.hpp"
#include "kjit/cache/private_dir.hpp"
#include "kjit/cache/sha256.hpp"
#include "kjit/cache/trust.hpp"
#include "kjit/error.hpp"
#include "kjit/log.hpp"

namespace kjit::cache {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

std::string printable_problem(std::string_view s, std::size_t max) {
  if (s.empty()) return "it is empty";
  if (s.size() > max)
    return "it is " + std::to_string(s.size()) + " bytes long, more than the " + std::to_string(max) + " allowed";
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c > 0x7e) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      return "character " + std::to_string(i) + " is " + hex + ", not printable ASCII (0x20-0x7e)";
    }
  }
  return {};
}

// A key or value quoted in a message: printable, cut after 80 characters.
std::string shown(std::string_view s) {
  std::string out;
  for (char ch : s.substr(0, 80)) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c <= 0x7e && c != '\\') {
      out += ch;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return "'" + out + (s.size() > 80 ? "...'" : "'");
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string file_text(const std::string& tag, const std::string& key, const std::string& value) {
  return Json{{"kjit_choice", kChoiceFormat}, {"tag", tag}, {"key", key}, {"value", value}}.dump() + "\n";
}

// The value of a choice file's bytes, else "" and `why`.
std::optional<std::string> parse_choice(const std::string& bytes, const std::string& tag, const std::string& key,
                                        std::string& why) {
  const Json j = Json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (bytes.empty() || j.is_discarded() || !j.is_object()) {
    why = bytes.empty() ? "it is empty" : j.is_discarded() ? "it is not JSON (cut short?)" : "it is not a JSON object";
    return std::nullopt;
  }
  auto field = [&](const char* name) -> const Json* {
    auto it = j.find(name);
    return it == j.end() ? nullptr : &*it;
  };
  const Json *format = field("kjit_choice"), *t = field("tag"), *k = field("key"), *v = field("value");
  if (!format || !format->is_number_integer() || format->get<std::int64_t>() != kChoiceFormat) {
    why = "it has no \"kjit_choice\": " + std::to_string(kChoiceFormat) + " format field";
    return std::nullopt;
  }
  if (!t || !k || !v || !t->is_string() || !k->is_string() || !v->is_string()) {
    why = "its \"tag\", \"key\" or \"value\" is missing or not a string";
    return std::nullopt;
  }
  if (t->get<std::string>() != tag || k->get<std::string>() != key) {
    why = "it holds another choice (tag " + shown(t->get<std::string>()) + ", key " + shown(k->get<std::string>()) +
          ") than its name says (tag " + shown(tag) + ", key " + shown(key) + ")";
    return std::nullopt;
  }
  std::string value = v->get<std::string>();
  if (const std::string p = choice_value_problem(value); !p.empty()) {
    why = "its value is not valid: " + p;
    return std::nullopt;
  }
  return value;
}

}  // namespace

std::string choice_key_problem(std::string_view key) { return printable_problem(key, kMaxChoiceKeyBytes); }
std::string choice_value_problem(std::string_view value) { return printable_problem(value, kMaxChoiceValueBytes); }

void check_choice_key(std::string_view key) {
  if (const std::string p = choice_key_problem(key); !p.empty())
    throw ValueError("tuned choice key " + shown(key) + " is not valid: " + p + "; allowed 1 to " +
                     std::to_string(kMaxChoiceKeyBytes) +
                     " printable ASCII characters, e.g. \"gemm|sm_90a|bf16|N=4096|K=4096\"");
}

void check_choice(std::string_view key, std::string_view value) {
  check_choice_key(key);
  if (const std::string p = choice_value_problem(value); !p.empty())
    throw ValueError("tuned choice value " + shown(value) + " for key " + shown(key) + " is not valid: " + p +
                     "; allowed 1 to " + std::to_string(kMaxChoiceValueBytes) +
                     " printable ASCII characters, e.g. \"wgmma:128x256x64:s4\"");
}

fs::path choices_dir(const fs::path& root) { return root / layout::kVersionDir / kChoicesDir; }

std::string choice_file_name(const std::string& tag, const std::string& key) {
  return to_hex(Sha256::of("kjit-choice\n" + tag + "\n" + key)) + kChoiceSuffix;
}

std::vector<fs::path> choice_files(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  fs::directory_iterator it(choices_dir(root), fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    struct stat st{};
    if (ends_with(it->path().filename().string(), kChoiceSuffix) && ::lstat(it->path().c_str(), &st) == 0 &&
        S_ISREG(st.st_mode))
      out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string choice_file_problem(const std::string& relative, std::string_view bytes) {
  const fs::path rel(relative);
  if (rel.parent_path() != fs::path(layout::kVersionDir) / kChoicesDir)
    return std::string("a tuned choice lies in ") + layout::kVersionDir + "/" + kChoicesDir + "/";
  const Json j = Json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("tag") || !j["tag"].is_string() || !j.contains("key") ||
      !j["key"].is_string())
    return "not a tuned choice file (a JSON object with a \"tag\" and a \"key\")";
  const std::string tag = j["tag"].get<std::string>(), key = j["key"].get<std::string>();
  if (const std::string p = choice_key_problem(key); !p.empty()) return "its key is not valid: " + p;
  std::string why;
  if (!parse_choice(std::string(bytes), tag, key, why)) return why;
  if (rel.filename().string() != choice_file_name(tag, key))
    return "its name is not the one of its tag and key (" + choice_file_name(tag, key) + ")";
  return {};
}

ChoiceStore::ChoiceStore(ChoiceStoreConfig config) : config_(std::move(config)), uid_(::geteuid()) {}

bool ChoiceStore::writable() const noexcept { return config_.mode == CacheMode::ReadWrite && !config_.root.empty(); }

fs::path ChoiceStore::path_of(const fs::path& root, const std::string& key) const {
  return choices_dir(root) / choice_file_name(config_.tag, key);
}

std::optional<std::string> ChoiceStore::load(const std::string& key) const {
  check_choice_key(key);
  if (config_.mode == CacheMode::Off) return std::nullopt;
  if (!config_.root.empty())
    if (auto v = load_from(config_.root, config_.mode != CacheMode::ReadWrite, key)) return v;
  for (const auto& layer : config_.layers)
    if (!layer.empty())
      if (auto v = load_from(layer, /*read_only=*/true, key)) return v;
  return std::nullopt;
}

std::optional<std::string> ChoiceStore::load_from(const fs::path& root, bool read_only, const std::string& key) const {
  const fs::path file = path_of(root, key);
  FileRead r = read_regular_file(file, kMaxChoiceFileBytes, Links::Refuse);
  if (r.absent) return std::nullopt;
  auto unusable = [&](const std::string& why) -> std::optional<std::string> {
    log::warn_once("choice:" + file.string() + ":" + why,
                   "kjit cache: not using the tuned choice " + file.string() + " (key " + shown(key) + "): " + why +
                       ". It counts as not tuned; `kjit clear` removes the writable "
                       "cache's choices, a later tuning run writes it again.");
    return std::nullopt;
  };
  if (!r.ok()) return unusable(r.error);
  std::string distrust = owned_path_problem(root, file, r.st, uid_);
  if (!distrust.empty() && read_only) {
    const std::string vouch =
        LayerLock::read(root, uid_).vouches_for(file.lexically_relative(root).generic_string(), r.bytes);
    distrust = vouch.empty() ? std::string() : distrust + ", and " + vouch;
  }
  if (!distrust.empty()) return unusable("it is not trusted (" + distrust + ")");
  std::string why;
  std::optional<std::string> value = parse_choice(r.bytes, config_.tag, key, why);
  if (!value) return unusable("it is damaged: " + why);
  return value;
}

std::string ChoiceStore::save(const std::string& key, const std::string& value) const {
  check_choice(key, value);
  if (!writable()) return {};
  const fs::path file = path_of(config_.root, key);
  // Never into a root that others may write to (the disk cache refuses it too, with a warning).
  auto root_problem = [&]() -> std::string {
    struct stat st{};
    if (::stat(config_.root.c_str(), &st) != 0) return "cannot stat " + config_.root.string();
    return ownership_problem(config_.root, st, uid_);
  };
  std::error_code ec;
  if (fs::exists(config_.root, ec))
    if (std::string p = root_problem(); !p.empty()) return p;
  if (std::string p = make_private_dirs(file.parent_path()); !p.empty()) return p;
  if (std::string p = root_problem(); !p.empty()) return p;
  if (auto failure = publish_atomically(file, file_text(config_.tag, key, value))) return failure->message();
  return {};
}

std::size_t ChoiceStore::count(const fs::path& root) { return choice_files(root).size(); }

std::size_t ChoiceStore::clear(const fs::path& root) {
  const fs::path dir = choices_dir(root);
  std::vector<fs::path> choices, temps;
  std::error_code ec;
  fs::directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    struct stat st{};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (ends_with(name, kChoiceSuffix))
      choices.push_back(it->path());
    else if (name.find(std::string(kChoiceSuffix) + ".tmp.") != std::string::npos)
      temps.push_back(it->path());
  }
  std::size_t removed = 0;
  for (const auto& p : choices)
    if (::unlink(p.c_str()) == 0) ++removed;
  // A temp file is a store in progress while its writer holds its flock (atomic_file.hpp).
  for (const auto& p : temps) {
    FileLock lock = FileLock::try_acquire_existing(p);
    if (lock.locked()) lock.release();  // unlinks while holding
  }
  ::rmdir(dir.c_str());  // when empty
  return removed;
}

}  // namespace kjit::cache
