// Test helpers around the Engine.
#pragma once

#include "kjit/engine.hpp"

namespace kjit::testing {

// Where Engine::prepare found (or made) `spec` for `target`.
inline Origin prepared_origin(Engine& engine, const Specialization& spec, const Target& target) {
  Origin o = Origin::Memory;
  engine.prepare(spec, target, &o);
  return o;
}
inline Origin prepared_origin(Engine&& engine, const Specialization& spec, const Target& target) {
  return prepared_origin(engine, spec, target);
}

}  // namespace kjit::testing
