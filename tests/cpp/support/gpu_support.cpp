#include "kjit/driver_library.hpp"
#include "test_support.hpp"

namespace kjit::testing {

bool have_cuda_device(std::string* why_not) { return DriverLibrary::available(why_not); }

}  // namespace kjit::testing
