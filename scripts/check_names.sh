#!/bin/sh
# check_names.sh [BUILDDIR] — fails when one name is defined in two modules,
# so that collisions like the thread pool's and the language's two sh_pool
# types (no file could include both headers) cannot come back. A module is a
# folder src/<module>/, plus include/ for the public API. BUILDDIR defaults
# to build/release (build it first: make lib).
#
# Names checked, all in one namespace:
#   - types of the headers: struct/union/enum tags defined with a body and
#     typedef names; a forward `typedef struct X X;` counts as its module's
#     definition when X's body is in that module (an opaque type whose body
#     is in a .c file) or nowhere, and as a use when X's body is in another
#     module. Types in .c files are the file's own and not counted;
#   - functions defined in headers (static inline);
#   - external symbols (functions and variables) of the module's objects,
#     from `nm -g --defined-only BUILDDIR/obj/src/<module>/*.o`.
# Prints each name defined in two modules with where. Run from .ci/run
# after the release build.
BUILDDIR=${1:-build/release}
NM=${NM:-nm}
case $BUILDDIR in /*) ;; *) BUILDDIR=$PWD/$BUILDDIR ;; esac
cd "$(dirname "$0")/.." || exit 2

if [ ! -d "$BUILDDIR/obj/src" ]; then
  echo "check_names: $BUILDDIR/obj/src not found (build it first: make lib)" >&2
  exit 2
fi
tmp=$(mktemp) || exit 2
trap 'rm -f "$tmp"' EXIT

# Types and header functions: "NAME MODULE WHAT FILE:LINE" lines. The awk
# drops comments, string and character literals and preprocessor lines,
# splits the rest into tokens and follows brace depth.
for f in include/*.h src/*/*.h src/*/*.c; do
  [ -f "$f" ] || continue
  case $f in include/*) m=include ;; *) m=${f#src/}; m=${m%%/*} ;; esac
  awk -v mod="$m" -v file="$f" '
    function emit(name, what, line) { if (name != "") print name, mod, what, file ":" line }
    function isid(t) { return t ~ /^[A-Za-z_][A-Za-z0-9_]*$/ }
    # the typedef of tokens td[1..ntd] (after "typedef", before ";"): its
    # name, and in fwd whether it is a forward typedef struct X X
    function td_name(   i, s, d, body, n) {
      s = 1; d = 0; body = 0
      for (i = 1; i <= ntd; i++) {
        if (td[i] == "{") { if (d == 0) body = 1; d++ }
        else if (td[i] == "}") { d--; if (d == 0) s = i + 1 }
      }
      fwd = !body && ntd == 3 && td[1] ~ /^(struct|union|enum)$/ && td[2] == td[3]
      for (i = s; i < ntd; i++) # (*name)(...): a function pointer
        if (td[i] == "(" && td[i + 1] == "*" && isid(td[i + 2])) return td[i + 2]
      n = ""
      for (i = s; i <= ntd; i++) {
        if (td[i] == "(" || td[i] == "[") break # name(args): a function type; name[N]
        if (isid(td[i])) n = td[i]
      }
      return n
    }
    function token(t, line,   nm) {
      if (intd) {
        if (t == ";" && depth == tddepth) {
          intd = 0; nm = td_name()
          if (file ~ /\.h$/) emit(nm, fwd ? "forward-typedef" : "typedef", tdline)
        }
        else td[++ntd] = t
      } else if (t == "typedef") { intd = 1; ntd = 0; tddepth = depth; tdline = line }
      if (t == "{") {
        if (p1 != "" && isid(p1) && p2 ~ /^(struct|union|enum)$/)
          emit(p1, (file ~ /\.c$/ ? "body-of-" : "") p2, line)
        else if (depth == 0 && p1 == ")" && fn != "" && file ~ /\.h$/) emit(fn, "function", line)
        depth++
      } else if (t == "}") depth--
      if (depth == 0) {
        if (t == "(" && parens == 0) fn = isid(p1) ? p1 : ""
        if (t == "(") parens++
        else if (t == ")") parens--
        else if (t == ";" || t == "=") fn = ""
      }
      p2 = p1; p1 = t
    }
    {
      line = $0
      if (cont) { cont = line ~ /\\$/; next }          # continued preprocessor line
      if (!incom && line ~ /^[ \t]*#/) { cont = line ~ /\\$/; next }
      out = ""
      while (line != "") {
        if (incom) {
          i = index(line, "*/")
          if (!i) { line = ""; break }
          line = substr(line, i + 2); incom = 0; out = out " "
          continue
        }
        c = substr(line, 1, 1); c2 = substr(line, 1, 2)
        if (c2 == "/*") { incom = 1; line = substr(line, 3); continue }
        if (c2 == "//") break
        if (c == "\"" || c == "\047") {                 # a literal: skip to its end
          for (i = 2; i <= length(line); i++) {
            d = substr(line, i, 1)
            if (d == "\\") { i++; continue }
            if (d == c) break
          }
          line = substr(line, i + 1); out = out " 0 "
          continue
        }
        out = out c; line = substr(line, 2)
      }
      gsub(/[^A-Za-z0-9_]/, " & ", out)
      ntok = split(out, tok, /[ \t]+/)
      for (k = 1; k <= ntok; k++) if (tok[k] != "") token(tok[k], FNR)
    }
  ' "$f" >>"$tmp" || { echo "check_names: reading $f failed" >&2; exit 2; }
done

# External symbols of each module's objects.
for d in "$BUILDDIR"/obj/src/*/; do
  m=$(basename "$d")
  for o in "$d"*.o; do
    [ -f "$o" ] || continue
    syms=$("$NM" -g --defined-only "$o") || { echo "check_names: $NM $o failed" >&2; exit 2; }
    printf '%s\n' "$syms" |
      awk -v mod="$m" -v file="$o" 'NF >= 3 { print $3, mod, "symbol(" $2 ")", file }' >>"$tmp"
  done
done

# A name whose definitions span more than one module is a collision. A
# struct body in a .c file (a type local to the file, or the hidden body of
# an opaque type) only decides what a forward typedef struct X X is: the
# definition of module M's own opaque type when X's body is in M (or
# nowhere), else a use of another module's type (not counted).
out=$(sort -k1,1 -k2,2 "$tmp" | awk '
  { rec[NR] = $0; split($0, f, " ") }
  f[3] ~ /^(body-of-)?(struct|union|enum)$/ { body[f[1], f[2]] = 1; hasbody[f[1]] = 1 }
  END {
    for (r = 1; r <= NR; r++) {
      split(rec[r], f, " ")
      if (f[3] ~ /^body-of-/) continue
      if (f[3] == "forward-typedef" && hasbody[f[1]] && !((f[1], f[2]) in body)) continue
      print rec[r]
    }
  }' | awk '
  $1 != name { flush(); name = $1; nmods = 0; lines = "" }
  { if (!($2 in seen)) { seen[$2] = 1; nmods++ } lines = lines "\n    " $2 ": " $3 " at " $4 }
  function flush() { if (nmods > 1) printf "  %s%s\n", name, lines; for (k in seen) delete seen[k] }
  END { flush() }')
if [ -n "$out" ]; then
  echo "check_names: names defined in more than one module (rename one; internal names are sh_<module>_...):" >&2
  printf '%s\n' "$out" >&2
  exit 1
fi
echo "check_names: $(cut -d' ' -f1 "$tmp" | sort -u | wc -l | tr -d ' ') names (types, header functions, external symbols), each defined in one module"
