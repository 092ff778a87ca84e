#include "entry_differences.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <tuple>

namespace kjit::cli {
namespace {

using cache::EntryInfo;
using cache::EntryMetadata;

// A flag's name: "--fast-compile=min" -> "--fast-compile"; "-DX=1" stays whole (a define is its own name).
std::string flag_name(const std::string& option) {
  if (option.rfind("-D", 0) == 0) return option;
  const auto eq = option.find('=');
  return eq == std::string::npos ? option : option.substr(0, eq);
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : " ") + i;
  return out;
}

// The options of `mine` that not every entry of the group has, and those others have that `mine` lacks
// (a flag `mine` sets to another value is not "lacked": its own value is shown).
std::string option_difference(const std::vector<const EntryMetadata*>& group, const EntryMetadata& mine) {
  std::set<std::string> everywhere(group.front()->options.begin(), group.front()->options.end());
  std::vector<std::string> anywhere;
  for (const EntryMetadata* m : group) {
    std::set<std::string> here(m->options.begin(), m->options.end());
    for (auto it = everywhere.begin(); it != everywhere.end();)
      it = here.count(*it) ? std::next(it) : everywhere.erase(it);
    for (const auto& o : m->options)
      if (std::find(anywhere.begin(), anywhere.end(), o) == anywhere.end()) anywhere.push_back(o);
  }
  std::vector<std::string> has, lacks;
  std::set<std::string> my_flags;
  for (const auto& o : mine.options)
    if (!everywhere.count(o)) {
      has.push_back(o);
      my_flags.insert(flag_name(o));
    }
  for (const auto& o : anywhere)
    if (!everywhere.count(o) && std::find(mine.options.begin(), mine.options.end(), o) == mine.options.end() &&
        !my_flags.count(flag_name(o)))
      lacks.push_back(o);
  std::string out;
  if (!has.empty()) out = "options: " + joined(has);
  if (!lacks.empty()) out += (out.empty() ? "options: without " : "; without ") + joined(lacks);
  return out;
}

}  // namespace

std::vector<std::string> differences(const std::vector<EntryInfo>& entries) {
  std::vector<std::string> out(entries.size());
  // Entries with metadata, grouped by what `kjit ls` shows of them; one per key (the first listed).
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<std::size_t>> groups;
  std::set<std::string> keys;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const EntryInfo& e = entries[i];
    if (!e.meta || !keys.insert(e.key).second) continue;
    groups[{cache::filed_target(*e.meta), e.meta->template_name, e.meta->name_expression}].push_back(i);
  }
  for (const auto& [_, members] : groups) {
    if (members.size() < 2) continue;
    std::vector<const EntryMetadata*> group;
    for (std::size_t i : members) group.push_back(&*entries[i].meta);
    auto differs = [&](const std::function<std::string(const EntryMetadata&)>& field) {
      return std::any_of(group.begin(), group.end(),
                         [&](const EntryMetadata* m) { return field(*m) != field(*group[0]); });
    };
    const auto digest = [](const EntryMetadata& m) { return m.template_digest.substr(0, 12); };
    const auto nvrtc = [](const EntryMetadata& m) { return m.nvrtc_version; };
    const auto kjit = [](const EntryMetadata& m) { return m.kjit_version; };
    const auto output = [](const EntryMetadata& m) { return std::string(cache::to_string(m.output)); };
    const bool by_digest = differs(digest), by_nvrtc = differs(nvrtc), by_kjit = differs(kjit),
               by_output = differs(output);
    for (std::size_t i : members) {
      const EntryMetadata& m = *entries[i].meta;
      std::vector<std::string> parts;
      if (std::string o = option_difference(group, m); !o.empty()) parts.push_back(o);
      if (by_digest) parts.push_back("template " + digest(m));
      if (by_nvrtc) parts.push_back("nvrtc " + nvrtc(m));
      if (by_kjit) parts.push_back("kjit " + kjit(m));
      if (by_output) parts.push_back("output " + output(m));
      std::string text;
      for (const auto& p : parts) text += (text.empty() ? "" : "; ") + p;
      out[i] = text.empty() ? "key only" : text;
    }
  }
  return out;
}

}  // namespace kjit::cli
