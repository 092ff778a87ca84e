# cmake -DSOURCE_DIR=<repo> -P layering_check.cmake
# Each layer includes only kjit headers of its own or of a layer below it:
#   base/   kjit/error.hpp, kjit/log.hpp (its own)
#   cache/  kjit/cache/*, and base's
# A violation is reported with its file and line, and the check fails.
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "layering_check.cmake needs -DSOURCE_DIR=<the kjit source tree>")
endif()

file(GLOB base_headers RELATIVE ${SOURCE_DIR}/base/include ${SOURCE_DIR}/base/include/kjit/*.hpp)
if(NOT base_headers)
  message(FATAL_ERROR "no headers under ${SOURCE_DIR}/base/include/kjit: is SOURCE_DIR the kjit source tree?")
endif()

set(violations "")
# check(<layer folder> <regex of the kjit headers it may include>)
function(check layer allowed)
  file(GLOB_RECURSE sources ${SOURCE_DIR}/${layer}/*.hpp ${SOURCE_DIR}/${layer}/*.cpp)
  if(NOT sources)
    message(FATAL_ERROR "no sources under ${SOURCE_DIR}/${layer}")
  endif()
  foreach(src ${sources})
    file(STRINGS ${src} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]kjit/")
    foreach(line ${lines})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]*[\"<]([^\">]*)[\">].*$" "\\1" header "${line}")
      if(NOT header MATCHES "${allowed}")
        file(RELATIVE_PATH rel ${SOURCE_DIR} ${src})
        set(violations "${violations}\n  ${rel}: #include \"${header}\"" PARENT_SCOPE)
      endif()
    endforeach()
  endforeach()
endfunction()

string(REPLACE ";" "|" base_alt "${base_headers}")
string(REPLACE "." "\\." base_alt "${base_alt}")
check(base "^(${base_alt})$")
check(cache "^(kjit/cache/[A-Za-z0-9_./]+|${base_alt})$")

if(violations)
  message(FATAL_ERROR "layering: these includes reach above their layer (base <- cache <- engine):${violations}\n"
                      "Move what they need down a layer (base/ for what both use), or pass it in a plain struct.")
endif()
message(STATUS "layering: base/ and cache/ include nothing above them")
