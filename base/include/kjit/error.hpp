// kjit error family. Every error says what was received, what is allowed and what to do next.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace kjit {

// Base of every kjit error (Python: kjit.Error).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A bad argument value (Python: ValueError).
class ValueError : public Error {
 public:
  using Error::Error;
};

// An argument of the wrong kind (Python: TypeError).
class TypeError : public Error {
 public:
  using Error::Error;
};

// NVRTC rejected a specialization. Carries everything needed to see why.
class CompileError : public Error {
 public:
  CompileError(std::string message, std::string log, std::string name_expression, std::vector<std::string> options,
               std::string source_excerpt)
      : Error(std::move(message)),
        log_(std::move(log)),
        name_expression_(std::move(name_expression)),
        options_(std::move(options)),
        source_excerpt_(std::move(source_excerpt)) {}
  const std::string& log() const noexcept { return log_; }
  const std::string& name_expression() const noexcept { return name_expression_; }
  const std::vector<std::string>& options() const noexcept { return options_; }
  // The specialized source lines around each error the log names (file:line markers included).
  const std::string& source_excerpt() const noexcept { return source_excerpt_; }

 private:
  std::string log_;
  std::string name_expression_;
  std::vector<std::string> options_;
  std::string source_excerpt_;
};

// Strict cache mode met a specialization that is not cached.
class CacheMissError : public Error {
 public:
  CacheMissError(std::string message, std::string key, std::string specialization)
      : Error(std::move(message)), key_(std::move(key)), specialization_(std::move(specialization)) {}
  const std::string& key() const noexcept { return key_; }
  const std::string& specialization() const noexcept { return specialization_; }

 private:
  std::string key_;
  std::string specialization_;
};

// A CUDA Driver API call failed (or the driver could not be loaded).
class DriverError : public Error {
 public:
  DriverError(std::string message, int code, std::string code_name)
      : Error(std::move(message)), code_(code), code_name_(std::move(code_name)) {}
  int code() const noexcept { return code_; }
  const std::string& code_name() const noexcept { return code_name_; }

 private:
  int code_;
  std::string code_name_;
};

// A launch was refused (bad configuration, argument mismatch, capture restrictions).
class LaunchError : public Error {
 public:
  using Error::Error;
};

}  // namespace kjit
