/*
 * input.c — classifies main's parameter type into what `sheaf run` feeds
 * (input.h): the checker reports the rest, the interpreter builds values.
 */
#include "lang/input.h"

#include <stdio.h>
#include <string.h>

static const char *const k_fields[SH_TF_COUNT] = {"word", "upos", "xpos", "deprel", "head", "index", "chars"};

const char *sh_tok_field_name(sh_tok_field f) { return (unsigned)f < SH_TF_COUNT ? k_fields[f] : "?"; }

static bool is_adt(const sh_type *t, const sh_adt *adt) { return t->kind == SH_TY_ADT && t->adt == adt; }

static void trees(const sh_type *t, sh_input_shape *s) {
  const sh_adt *adt = s->adt = t->adt;
  for (int c = 0; c < adt->n_ctors; c++) {
    const sh_ctor *k = &adt->ctors[c];
    int n_int = 0, n_sub = 0, n_list = 0, word = -1, kids = -1;
    for (int f = 0; f < k->n_fields; f++) {
      const sh_type *ft = k->field_types[f];
      if (ft->kind == SH_TY_I32) n_int++, word = f;
      else if (is_adt(ft, adt)) n_sub++;
      else if (ft->kind == SH_TY_LIST && is_adt(ft->elems[0], adt)) n_list++, kids = f;
    }
    if (n_int + n_sub + n_list != k->n_fields) continue;
    if (n_int == 1 && n_sub == 0 && n_list == 0 && s->ctor_leaf < 0) s->ctor_leaf = c, s->leaf_word = word;
    else if (n_int == 0 && n_sub == 2 && n_list == 0 && s->ctor_node < 0) s->ctor_node = c;
    else if (n_int == 0 && n_sub == 1 && n_list == 0 && s->ctor_unary < 0) s->ctor_unary = c;
    else if (n_int == 1 && n_sub == 0 && n_list == 1 && s->ctor_dep < 0)
      s->ctor_dep = c, s->leaf_word = word, s->dep_kids = kids;
  }
  if (s->ctor_dep >= 0) s->kind = SH_INPUT_DEP_TREE;
  else if (s->ctor_leaf >= 0 && s->ctor_node >= 0) s->kind = SH_INPUT_BINARY_TREE;
}

/* list[R]: R one constructor of named token fields. */
static void records(const sh_type *el, const sh_symtab *syms, sh_input_shape *s, char *why, size_t cap) {
  const sh_adt *adt = el->adt;
  const char *name = sh_sym_name(syms, adt->name);
  if (adt->n_ctors != 1) {
    snprintf(why, cap, "a sentence of records needs a type with one constructor, but %s has %d", name,
             adt->n_ctors);
    return;
  }
  const sh_ctor *k = &adt->ctors[0];
  if (k->n_fields < 1 || k->n_fields > SH_INPUT_MAX_FIELDS) {
    snprintf(why, cap, "a token record has 1 to %d fields, but %s has %d", SH_INPUT_MAX_FIELDS, name,
             k->n_fields);
    return;
  }
  for (int f = 0; f < k->n_fields; f++) {
    const char *fn = k->field_names[f] ? sh_sym_name(syms, k->field_names[f]) : NULL;
    int tf = -1;
    for (int q = 0; fn && q < SH_TF_COUNT; q++)
      if (!strcmp(fn, k_fields[q])) tf = q;
    const sh_type *ft = k->field_types[f];
    bool ok_type = tf == SH_TF_CHARS ? ft->kind == SH_TY_LIST && ft->elems[0]->kind == SH_TY_I32
                                     : ft->kind == SH_TY_I32;
    if (tf < 0 || !ok_type || (s->uses >> tf & 1)) {
      snprintf(why, cap,
               "field %d of %s%s%s%s: a token record's fields are named word, upos, xpos, deprel, head, "
               "index (i32) or chars (list[i32]), each at most once",
               f + 1, name, fn ? " ('" : "", fn ? fn : "", fn ? "')" : " has no name");
      return;
    }
    s->rec_field[f] = (uint8_t)tf;
    s->uses |= 1u << tf;
  }
  s->ctor_rec = 0;
  s->n_rec_fields = k->n_fields;
  s->adt = adt;
  s->kind = SH_INPUT_RECORDS;
}

void sh_input_classify(const sh_type *t, const sh_symtab *syms, sh_input_shape *s, char *why, size_t cap) {
  memset(s, 0, sizeof *s);
  s->ctor_leaf = s->ctor_node = s->ctor_unary = s->ctor_dep = s->ctor_rec = -1;
  if (cap) why[0] = '\0';
  if (t->kind == SH_TY_LIST && t->elems[0]->kind == SH_TY_I32) {
    s->kind = SH_INPUT_TOKENS;
  } else if (t->kind == SH_TY_LIST && t->elems[0]->kind == SH_TY_ADT) {
    records(t->elems[0], syms, s, why, cap);
  } else if (t->kind == SH_TY_ADT) {
    trees(t, s);
    if (s->kind == SH_INPUT_UNSUPPORTED)
      snprintf(why, cap,
               "%s is not a tree sheaf run can read: a binary tree is Leaf(i32) | Node(T, T) (| Unary(T)), "
               "a dependency tree Dep(i32, list[T])",
               sh_sym_name(syms, t->adt->name));
  }
  if (s->kind == SH_INPUT_UNSUPPORTED && cap && !why[0])
    snprintf(why, cap, "sheaf run feeds main a tree type, list[i32] or a list of token records");
}
