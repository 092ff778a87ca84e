# cmake -DSOURCE_DIR=<repo> -P layering_check.cmake
# Each layer includes only kjit headers of its own or of a layer below it:
#   base/   kjit/error.hpp, kjit/log.hpp (its own)
#   cache/  kjit/cache/*, and base's
# and the torch-free part of the Python binding includes nothing of torch:
#   python/src/core/  no torch, ATen, c10 or caffe2 header, nothing of the binding's torch/ or ops/
#                     (kjit._core imports without torch; python/CMakeLists.txt)
# A violation is reported with its file and line, and the check fails.
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "layering_check.cmake needs -DSOURCE_DIR=<the kjit source tree>")
endif()

file(GLOB base_headers RELATIVE ${SOURCE_DIR}/base/include ${SOURCE_DIR}/base/include/kjit/*.hpp)
if(NOT base_headers)
  message(FATAL_ERROR "no headers under ${SOURCE_DIR}/base/include/kjit: is SOURCE_DIR the kjit source tree?")
endif()

set(violations "")
# scan(<folder> <regex of the #include lines to read> <regex of headers> <violating_match> <note>): an
# include of a .hpp / .cpp under the folder whose header matches the regex (violating_match TRUE) or does
# not (FALSE) is a violation, reported with `note`.
function(scan folder line_regex regex violating_match note)
  file(GLOB_RECURSE sources ${SOURCE_DIR}/${folder}/*.hpp ${SOURCE_DIR}/${folder}/*.cpp)
  if(NOT sources)
    message(FATAL_ERROR "no sources under ${SOURCE_DIR}/${folder}")
  endif()
  foreach(src ${sources})
    file(STRINGS ${src} lines REGEX "${line_regex}")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]*)[\">].*$" "\\1" header "${line}")
      set(matched FALSE)
      if(header MATCHES "${regex}")
        set(matched TRUE)
      endif()
      if(matched STREQUAL violating_match)
        file(RELATIVE_PATH rel ${SOURCE_DIR} ${src})
        set(violations "${violations}\n  ${rel}: #include \"${header}\"${note}")
      endif()
    endforeach()
  endforeach()
  set(violations "${violations}" PARENT_SCOPE)  # every violation, not only the folder's last
endfunction()

# check(<layer folder> <regex of the kjit headers it may include>)
function(check layer allowed)
  scan(${layer} "^[ \t]*#[ \t]*include[ \t]*[\"<]kjit/" "${allowed}" FALSE "")
  set(violations "${violations}" PARENT_SCOPE)
endfunction()

# forbid(<folder> <regex of the headers it must not include>)
function(forbid folder denied)
  scan(${folder} "^[ \t]*#[ \t]*include[ \t]*[\"<]" "${denied}" TRUE " (torch-free folder)")
  set(violations "${violations}" PARENT_SCOPE)
endfunction()

string(REPLACE ";" "|" base_alt "${base_headers}")
string(REPLACE "." "\\." base_alt "${base_alt}")
check(base "^(${base_alt})$")
check(cache "^(kjit/cache/[A-Za-z0-9_./]+|${base_alt})$")
forbid(python/src/core "^(\\.\\./)*(torch|ATen|c10|caffe2|ops)/")

if(violations)
  message(FATAL_ERROR "layering: these includes reach above their layer (base <- cache <- engine; "
                      "python/src/core/ is torch-free):${violations}\n"
                      "Move what they need down a layer (base/ for what both use), or pass it in a plain struct; "
                      "torch code of the binding belongs in python/src/torch/ (torch_hooks.hpp is the seam).")
endif()
message(STATUS "layering: base/ and cache/ include nothing above them; python/src/core/ includes no torch header")
