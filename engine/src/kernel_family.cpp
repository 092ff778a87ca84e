#include "kjit/kernel_family.hpp"

#include <array>
#include <mutex>

#include "kjit/error.hpp"

namespace kjit {

KernelFamily::KernelFamily(Engine& engine, std::shared_ptr<const Template> tmpl, const std::string& kernel,
                           CompileOptions options, bool arch_specific)
    : engine_(&engine),
      template_(std::move(tmpl)),
      decl_(&template_->kernel(kernel)),
      options_(std::move(options)),
      arch_specific_(arch_specific),
      family_(engine.family_id(*template_, kernel, options_, arch_specific)) {
  options_.validate();
}

const Target& KernelFamily::target(int device) const {
  const Target& t = device_target(device);
  if (!arch_specific_) return t;
  constexpr int kMaxDevices = 64;  // as device_target's table
  static std::array<Target, kMaxDevices> specific;
  static std::array<std::once_flag, kMaxDevices> once;
  std::call_once(once[device], [&] { specific[device] = Target{t.arch, Target::Kind::SmArchSpecific}; });
  return specific[device];
}

Specialization KernelFamily::specialization(const TemplateArg* args, std::size_t n) const {
  if (n > decl_->template_params.size())
    throw ValueError("kernel '" + decl_->name + "' takes " + std::to_string(decl_->template_params.size()) +
                     " template arguments, got " + std::to_string(n) + "; its parameters are " +
                     decl_->describe_params());
  std::vector<std::pair<std::string, TemplateArg>> named;
  named.reserve(n);
  for (std::size_t i = 0; i < n; ++i) named.emplace_back(decl_->template_params[i].name, args[i]);
  return Specialization(template_, decl_->name, named, options_);
}

bool KernelFamily::spec_key(const TemplateArg* args, std::size_t n, int device, SpecKey& key) const noexcept {
  if (n > static_cast<std::size_t>(SpecKey::kMaxArgs)) return false;  // too many to key: always the slow path
  key.family = family_;
  key.device = device;
  key.nargs = static_cast<std::uint32_t>(n);
  for (std::size_t i = 0; i < n; ++i) key.args[i] = args[i].word();
  return true;
}

std::shared_ptr<const SpecializedKernel> KernelFamily::find(const TemplateArg* args, std::size_t n,
                                                            int device) const noexcept {
  SpecKey key;
  if (!spec_key(args, n, device, key)) return nullptr;
  auto hit = engine_->find(key);
  if (hit) engine_->count_memory_hit();
  return hit;
}

std::shared_ptr<const SpecializedKernel> KernelFamily::get(const TemplateArg* args, std::size_t n, int device,
                                                           Origin* origin, const char* forbidden) const {
  if (auto hit = find(args, n, device)) {
    if (origin) *origin = Origin::Memory;
    return hit;
  }
  Specialization spec = specialization(args, n);
  auto k = engine_->get(spec, target(device), forbidden, origin);
  SpecKey key;
  if (spec_key(args, n, device, key)) engine_->remember(key, k);
  return k;
}

std::shared_ptr<const SpecializedKernel> KernelFamily::compile_only(const TemplateArg* args, std::size_t n,
                                                                    const Target& target, Origin* origin) const {
  const Target t =
      arch_specific_ && target.kind == Target::Kind::Sm ? Target{target.arch, Target::Kind::SmArchSpecific} : target;
  return engine_->compile_only(specialization(args, n), t, origin);
}

void KernelFamily::prepare_ahead(const TemplateArg* args, std::size_t n, int device) const noexcept {
  SpecKey key;
  if (!spec_key(args, n, device, key) || engine_->find(key)) return;
  try {
    engine_->prepare_ahead(key, specialization(args, n), target(device));
  } catch (...) {
    // The get() that wants it reports the problem.
  }
}

const Target& device_target(int device) {
  constexpr int kMaxDevices = 64;
  static std::array<Target, kMaxDevices> targets;
  static std::array<std::once_flag, kMaxDevices> once;
  if (device < 0 || device >= kMaxDevices)
    throw ValueError("device ordinal " + std::to_string(device) + " is out of range [0, " +
                     std::to_string(kMaxDevices) + ")");
  std::call_once(once[device], [&] { targets[device] = Target::for_device(device); });
  return targets[device];
}

}  // namespace kjit
