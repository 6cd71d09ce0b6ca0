#!/bin/sh
# check_exports.sh [LIB] — checks that the shared library exports the public
# API and nothing else. LIB defaults to build/release/libsheaf.so.
#
# The library is built with -fvisibility=hidden; the public headers
# (include/*.h) mark their functions SHEAF_API (include/sheaf.h). Fails,
# printing the offenders, when
#   - `nm -D --defined-only LIB` lists a symbol that does not start with
#     sheaf_ (an internal function or variable that became visible), apart
#     from the linker's own (_init, _fini, __bss_start, _edata, _end);
#   - a function declared in include/*.h lacks SHEAF_API, or one declared
#     with it is not exported (it would be missing for users of the .so,
#     while the CLI and tests, linked statically, would not notice).
# Run from .ci/run after the release build.
LIB=${1:-build/release/libsheaf.so}
NM=${NM:-nm}
INC=$(dirname "$0")/../include

if [ ! -f "$LIB" ]; then
  echo "check_exports: $LIB not found (build it first: make lib)" >&2
  exit 2
fi
syms=$("$NM" -D --defined-only "$LIB") || {
  echo "check_exports: $NM -D --defined-only $LIB failed" >&2
  exit 2
}
# "ADDRESS TYPE NAME" per symbol (a versioned name may carry @VERSION).
syms=$(printf '%s\n' "$syms" | awk 'NF >= 3 { sub(/@.*/, "", $3); print $2, $3 }')
status=0

bad=$(printf '%s\n' "$syms" | grep -Ev ' (sheaf_[A-Za-z0-9_]*|_init|_fini|__bss_start|_edata|_end)$')
if [ -n "$bad" ]; then
  echo "check_exports: $LIB exports $(printf '%s\n' "$bad" | wc -l | tr -d ' ') symbol(s) outside the public API (type, name):" >&2
  printf '%s\n' "$bad" | sed 's/^/  /' >&2
  echo "check_exports: make them static, or hidden (no SHEAF_API): only include/*.h's sheaf_* functions are exported" >&2
  status=1
fi

# Function declarations of the public headers: lines at column 0 naming a
# sheaf_ function (typedefs and static inline functions aside).
decls=$(grep -hE '^[A-Za-z_].*sheaf_[a-z0-9_]+\(' "$INC"/*.h | grep -Ev '^(typedef|static|#)')
unmarked=$(printf '%s\n' "$decls" | grep -v '^SHEAF_API ')
if [ -n "$unmarked" ]; then
  echo "check_exports: public declarations without SHEAF_API (hidden in $LIB):" >&2
  printf '%s\n' "$unmarked" | sed 's/^/  /' >&2
  status=1
fi
exported=$(printf '%s\n' "$syms" | awk '{ print $2 }')
missing=$(printf '%s\n' "$decls" | grep '^SHEAF_API ' |
  awk 'match($0, /sheaf_[a-z0-9_]+\(/) { print substr($0, RSTART, RLENGTH - 1) }' | sort -u |
  while read -r f; do printf '%s\n' "$exported" | grep -qx "$f" || echo "$f"; done)
if [ -n "$missing" ]; then
  echo "check_exports: declared SHEAF_API in include/ but not exported by $LIB:" >&2
  printf '%s\n' "$missing" | sed 's/^/  /' >&2
  status=1
fi

if [ "$status" = 0 ]; then
  echo "check_exports: $LIB exports $(printf '%s\n' "$exported" | grep -c '^sheaf_') sheaf_* functions and nothing else"
fi
exit "$status"
