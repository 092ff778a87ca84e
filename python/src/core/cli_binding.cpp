// `python -m kjit ...`: kjit::cli::run with Python's sys.stdout / sys.stderr. The GIL is released while
// the command runs (`warm -j N` compiles on worker threads, whose warnings and output take it back).
#include <pybind11/stl.h>

#include <cstring>
#include <mutex>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "cli.hpp"

namespace kjit::python {
namespace {

// Writes to sys.<name>, a line (or a progress-bar '\r' update) at a time, taking the GIL to do it.
class PythonStreamBuf : public std::streambuf {
 public:
  explicit PythonStreamBuf(const char* name) : name_(name) {}
  ~PythonStreamBuf() override { flush_now(); }

  void flush_now() {
    std::lock_guard<std::mutex> lock(mu_);
    write_out();
  }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return traits_type::not_eof(c);
    std::lock_guard<std::mutex> lock(mu_);
    buf_.push_back(static_cast<char>(c));
    if (c == '\n' || c == '\r') write_out();
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    std::lock_guard<std::mutex> lock(mu_);
    buf_.append(s, static_cast<std::size_t>(n));
    if (std::memchr(s, '\n', static_cast<std::size_t>(n)) || std::memchr(s, '\r', static_cast<std::size_t>(n)))
      write_out();
    return n;
  }
  int sync() override {
    std::lock_guard<std::mutex> lock(mu_);
    write_out();
    return 0;
  }

 private:
  void write_out() {
    if (buf_.empty()) return;
    py::gil_scoped_acquire gil;
    try {
      py::object stream = py::module_::import("sys").attr(name_);
      PyObject* text = PyUnicode_DecodeUTF8(buf_.data(), static_cast<Py_ssize_t>(buf_.size()), "replace");
      if (!text) throw py::error_already_set();
      stream.attr("write")(py::reinterpret_steal<py::object>(text));
      stream.attr("flush")();
    } catch (py::error_already_set&) {
      PyErr_Clear();  // a closed or broken stream: the output is lost, the command goes on
    }
    buf_.clear();
  }
  const char* name_;
  std::string buf_;
  std::mutex mu_;
};

int cli_run(const std::vector<std::string>& args) {
  PythonStreamBuf out_buf("stdout"), err_buf("stderr");
  int status;
  {
    std::ostream out(&out_buf), err(&err_buf);
    py::gil_scoped_release release;
    status = kjit::cli::run(args, out, err);
    out.flush();
    err.flush();
  }
  out_buf.flush_now();
  err_buf.flush_now();
  return status;
}

}  // namespace

void bind_cli(py::module_& m) {
  m.def("cli_run", &cli_run, py::arg("args"),
        "Runs one `kjit` command (args without the program name) with sys.stdout / sys.stderr; returns its "
        "exit status.");
}

}  // namespace kjit::python
