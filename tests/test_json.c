/*
 * test_json.c — the strict JSON reader (src/io/json.c): values and number
 * conversions, string escapes and UTF-8 rules, error positions, nesting
 * limit, allocation failures, and the string writer round trip.
 */
#include "base/buf.h"
#include "harness.h"
#include "io/json.h"

static sh_json_doc *parse_ok(const char *text) {
  sheaf_ctx *ctx = th_ctx();
  sh_json_doc *doc = NULL;
  if (!CHECK_OK(ctx, sh_json_parse(ctx, text, strlen(text), 0, &doc, NULL))) return NULL;
  return doc;
}

TEST(json_parses_values_and_numbers) {
  sh_json_doc *doc = parse_ok(
      " {\"a\": [1, -2, 3.5, 1e3, true, false, null, \"x\"], \"b\": {}, \"c\": [],"
      " \"u\": [18446744073709551615, 18446744073709551616, -9223372036854775808,"
      " -9223372036854775809, -0, 0.5e-1]}\n");
  REQUIRE(doc);
  const sh_json *r = sh_json_root(doc);
  CHECK_EQ_INT(r->kind, SH_JSON_OBJECT);
  CHECK_EQ_SIZE(r->len, 4);
  CHECK_EQ_STR(r->u.members[2].key, "c");
  const sh_json *a = sh_json_get(r, "a");
  REQUIRE(a && a->kind == SH_JSON_ARRAY && a->len == 8);
  int64_t i;
  uint64_t u;
  CHECK(sh_json_u64(&a->u.items[0], &u) && u == 1);
  CHECK(!sh_json_u64(&a->u.items[1], &u));
  CHECK(sh_json_i64(&a->u.items[1], &i) && i == -2);
  CHECK(!sh_json_i64(&a->u.items[2], &i)); /* 3.5 */
  CHECK(a->u.items[2].u.num.value == 3.5);
  CHECK(!(a->u.items[3].flags & SH_JSON_INT)); /* 1e3 is not an integer literal */
  CHECK(a->u.items[3].u.num.value == 1000.0);
  CHECK_EQ_STR(a->u.items[3].u.num.text, "1e3");
  CHECK(a->u.items[4].kind == SH_JSON_BOOL && a->u.items[4].u.boolean);
  CHECK(a->u.items[5].kind == SH_JSON_BOOL && !a->u.items[5].u.boolean);
  CHECK_EQ_INT(a->u.items[6].kind, SH_JSON_NULL);
  CHECK_EQ_STR(a->u.items[7].u.str, "x");
  CHECK_EQ_INT(a->u.items[7].pos, 44); /* byte offset of the value */
  CHECK_EQ_SIZE(sh_json_get(r, "b")->len, 0);
  CHECK(sh_json_get(r, "c")->kind == SH_JSON_ARRAY);
  CHECK(sh_json_get(r, "zz") == NULL);
  CHECK(sh_json_get(a, "a") == NULL); /* not an object */
  const sh_json *n = sh_json_get(r, "u")->u.items;
  CHECK(sh_json_u64(&n[0], &u) && u == UINT64_MAX);
  CHECK(!sh_json_i64(&n[0], &i));
  CHECK(!sh_json_u64(&n[1], &u) && (n[1].flags & SH_JSON_BIG));
  CHECK(n[1].u.num.value == 18446744073709551616.0);
  CHECK(sh_json_i64(&n[2], &i) && i == INT64_MIN);
  CHECK(!sh_json_i64(&n[3], &i));
  CHECK(!sh_json_u64(&n[4], &u) && sh_json_i64(&n[4], &i) && i == 0); /* -0 */
  CHECK(signbit(n[4].u.num.value));
  CHECK_NEAR(n[5].u.num.value, 0.05, 1e-17);
  CHECK_EQ_STR(sh_json_kind_name(SH_JSON_OBJECT), "object");
  sh_json_doc_free(doc);
}

TEST(json_decodes_string_escapes) {
  sh_json_doc *doc =
      parse_ok("[\"\\\"\\\\\\/\\b\\f\\n\\r\\t\", \"a\\u0000b\", \"\\u00e9\\u4E2D\\uD83D\\uDE00\","
               " \"\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80\", \"\"]");
  REQUIRE(doc);
  const sh_json *r = sh_json_root(doc);
  REQUIRE(r->len == 5);
  CHECK_EQ_STR(r->u.items[0].u.str, "\"\\/\b\f\n\r\t");
  CHECK_EQ_SIZE(r->u.items[1].len, 3);
  CHECK(memcmp(r->u.items[1].u.str, "a\0b", 4) == 0);
  CHECK_EQ_STR(r->u.items[2].u.str, "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
  CHECK_EQ_STR(r->u.items[3].u.str, r->u.items[2].u.str);
  CHECK_EQ_SIZE(r->u.items[4].len, 0);
  sh_json_doc_free(doc);
}

TEST(json_reports_error_positions) {
  sheaf_ctx *ctx = th_ctx();
  static const struct {
    const char *text;
    size_t line, col;
    const char *msg;
  } cases[] = {
      {"{\n  \"a\": 1,\n  \"b\" 2\n}", 3, 7, "expected ':' after object key, found '2'"},
      {"[1, 2,]", 1, 7, "expected a value, found ']'"},
      {"", 1, 1, "unexpected end of input"},
      {"   ", 1, 4, "unexpected end of input"},
      {"[1] [2]", 1, 5, "unexpected '[' after the JSON value"},
      {"\"\\ud83d\\u0041\"", 1, 2, "lone high surrogate \\uD83D"},
      {"\"abc\n\"", 1, 5, "control character 0x0A"},
      {"[\"\xF0\x9F\x98\"]", 1, 3, "invalid UTF-8 (byte 0xF0)"}, /* cut sequence */
      {"[\"\x80\"]", 1, 3, "invalid UTF-8 (byte 0x80)"},
      {"nul", 1, 1, "expected a value, found 'n'"},
      {"-01", 1, 1, "leading zero"},
      {"{\"a\":1 \"b\":2}", 1, 8, "expected ',' or '}' in object"},
  };
  for (size_t i = 0; i < SH_ARRAY_LEN(cases); i++) {
    sh_json_doc *doc = (sh_json_doc *)(uintptr_t)1;
    sh_json_error e;
    sheaf_status st = sh_json_parse(ctx, cases[i].text, strlen(cases[i].text), 0, &doc, &e);
    if (!CHECK_EQ_INT(st, SHEAF_ERR_PARSE)) {
      th_fail(__FILE__, __LINE__, "case %zu parsed", i);
      sh_json_doc_free(doc);
      continue;
    }
    CHECK(doc == NULL);
    if (!CHECK_EQ_SIZE(e.line, cases[i].line) || !CHECK_EQ_SIZE(e.col, cases[i].col) ||
        !CHECK_CONTAINS(e.msg, cases[i].msg))
      th_fail(__FILE__, __LINE__, "case %zu: %zu:%zu %s", i, e.line, e.col, e.msg);
    char expect[64];
    snprintf(expect, sizeof expect, "line %zu, column %zu: ", cases[i].line, cases[i].col);
    CHECK(strncmp(sheaf_ctx_last_error(ctx), expect, strlen(expect)) == 0);
    CHECK_EQ_INT(sheaf_ctx_last_status(ctx), SHEAF_ERR_PARSE);
  }
  /* the text need not be NUL-terminated: only len bytes are read */
  sh_json_doc *doc;
  CHECK_OK(ctx, sh_json_parse(ctx, "[1]xyz", 3, 0, &doc, NULL));
  sh_json_doc_free(doc);
}

TEST(json_nesting_limit) {
  sheaf_ctx *ctx = th_ctx();
  char deep[600];
  for (int d = 1; d <= 200; d += 199) { /* 1 ok at any limit; 200 over the default */
    size_t n = 0;
    for (int i = 0; i < d; i++) deep[n++] = '[';
    for (int i = 0; i < d; i++) deep[n++] = ']';
    sh_json_doc *doc = NULL;
    sh_json_error e;
    sheaf_status st = sh_json_parse(ctx, deep, n, 0, &doc, &e);
    if (d == 1) {
      CHECK_OK(ctx, st);
    } else {
      CHECK_EQ_INT(st, SHEAF_ERR_PARSE);
      CHECK_CONTAINS(e.msg, "nesting deeper than 128 levels");
      CHECK_EQ_SIZE(e.pos, 128);
    }
    sh_json_doc_free(doc);
  }
  sh_json_doc *doc = NULL;
  CHECK_STATUS(ctx, sh_json_parse(ctx, "[[[]]]", 6, 2, &doc, NULL), SHEAF_ERR_PARSE);
  CHECK_OK(ctx, sh_json_parse(ctx, "[[[]]]", 6, 3, &doc, NULL));
  sh_json_doc_free(doc);
}

TEST(json_survives_allocation_failures) {
  sheaf_ctx *ctx = th_ctx();
  /* enough members and long strings to need several chunks and stack growth */
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_buf_putc(&b, '{');
  for (int i = 0; i < 300; i++)
    sh_buf_printf(&b, "%s\"k%d\":[%d,\"%0500d\",{\"x\":[1,2,3]}]", i ? "," : "", i, i, i);
  sh_buf_putc(&b, '}');
  REQUIRE_OK(ctx, sh_buf_status(&b));
  bool done = false;
  for (long n = 1; n < 100 && !done; n++) {
    sh_json_doc *doc = NULL;
    th_fail_alloc_at(n);
    sheaf_status st = sh_json_parse(ctx, (const char *)b.data, b.len, 0, &doc, NULL);
    th_fail_alloc_at(0);
    if (st == SHEAF_OK) {
      const sh_json *r = sh_json_root(doc);
      CHECK_EQ_SIZE(r->len, 300);
      CHECK_EQ_STR(r->u.members[299].key, "k299");
      CHECK_EQ_SIZE(r->u.members[299].value.u.items[1].len, 500);
      sh_json_doc_free(doc);
      done = true;
    } else {
      CHECK_EQ_INT(st, SHEAF_ERR_NOMEM);
      CHECK(doc == NULL);
    }
  }
  CHECK(done);
  sh_buf_free(&b);
}

TEST(json_writer_escapes_and_round_trips) {
  sheaf_ctx *ctx = th_ctx();
  char s[200];
  size_t n = 0;
  for (int c = 1; c < 0x80; c++) s[n++] = (char)c;
  memcpy(s + n, "\xC3\xA9\xF0\x9F\x98\x80", 6); /* UTF-8 passes through */
  n += 6;
  s[n++] = '\0'; /* an embedded NUL */
  s[n++] = 'z';
  sh_buf b;
  sh_buf_init(&b, ctx);
  sh_json_put_string(&b, s, n);
  REQUIRE_OK(ctx, sh_buf_status(&b));
  const char *out = sh_buf_cstr(&b);
  CHECK(strncmp(out, "\"\\u0001\\u0002", 13) == 0);
  CHECK_CONTAINS(out, "\\b\\t\\n\\u000b\\f\\r");
  CHECK_CONTAINS(out, " !\\\"#");
  CHECK_CONTAINS(out, "[\\\\]");
  CHECK_CONTAINS(out, "\x7F\xC3\xA9\xF0\x9F\x98\x80\\u0000z\"");
  sh_json_doc *doc;
  REQUIRE_OK(ctx, sh_json_parse(ctx, out, b.len, 0, &doc, NULL));
  const sh_json *r = sh_json_root(doc);
  CHECK_EQ_SIZE(r->len, n);
  CHECK(memcmp(r->u.str, s, n) == 0);
  sh_json_doc_free(doc);
  sh_buf_free(&b);
}

TEST(json_utf8_validation) {
  static const struct {
    const char *s;
    bool ok;
  } cases[] = {
      {"plain", true},
      {"\xC3\xA9", true},
      {"\xE2\x82\xAC", true},
      {"\xF0\x9F\x98\x80", true},
      {"\xF4\x8F\xBF\xBF", true},  /* U+10FFFF */
      {"\xEF\xBF\xBF", true},      /* U+FFFF */
      {"\xC3", false},             /* cut */
      {"\xC1\xBF", false},         /* overlong */
      {"\xE0\x9F\xBF", false},     /* overlong */
      {"\xF0\x8F\xBF\xBF", false}, /* overlong */
      {"\xED\xA0\x80", false},     /* surrogate */
      {"\xF4\x90\x80\x80", false}, /* > U+10FFFF */
      {"\xF5\x80\x80\x80", false},
      {"\x80", false},
      {"\xFF", false},
      {"a\xE2\x82", false},
  };
  for (size_t i = 0; i < SH_ARRAY_LEN(cases); i++)
    if (!CHECK_EQ_INT(sh_utf8_valid(cases[i].s, strlen(cases[i].s)), cases[i].ok))
      th_fail(__FILE__, __LINE__, "case %zu", i);
}
