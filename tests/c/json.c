/* A small, strict JSON reader: objects, arrays, strings (with \u escapes and surrogate pairs),
 * numbers, true/false/null. Nesting is bounded; every allocation failure is an error. */
#include "json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSON_MAX_DEPTH 64

typedef struct {
    const char *p;
    char *err;
    size_t err_len;
    int failed;
} parser;

static void fail(parser *ps, const char *what) {
    if (!ps->failed && ps->err && ps->err_len) {
        snprintf(ps->err, ps->err_len, "%s near \"%.20s\"", what, ps->p);
    }
    ps->failed = 1;
}

static void skip_ws(parser *ps) {
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
}

static json *new_value(parser *ps, json_type type) {
    json *v = calloc(1, sizeof *v);
    if (!v) fail(ps, "out of memory");
    else v->type = type;
    return v;
}

static int push_item(parser *ps, json *container, json *item, char *key) {
    json **items = realloc(container->items, (container->count + 1) * sizeof *items);
    if (!items) { fail(ps, "out of memory"); return 0; }
    container->items = items;
    if (container->type == JSON_OBJECT) {
        char **keys = realloc(container->keys, (container->count + 1) * sizeof *keys);
        if (!keys) { fail(ps, "out of memory"); return 0; }
        container->keys = keys;
        keys[container->count] = key;
    }
    items[container->count++] = item;
    return 1;
}

static int hex4(const char *s, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(char *dst, unsigned cp) {
    if (cp < 0x80) { dst[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        dst[0] = (char)(0xC0 | (cp >> 6));
        dst[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xE0 | (cp >> 12));
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        dst[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    dst[0] = (char)(0xF0 | (cp >> 18));
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    dst[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Parses a string literal at ps->p (which is '"'); returns a malloc'd copy. */
static char *parse_string(parser *ps) {
    const char *s = ps->p + 1;
    size_t cap = strlen(s) + 1; /* decoded text is never longer than the source */
    char *out = malloc(cap);
    size_t n = 0;
    if (!out) { fail(ps, "out of memory"); return NULL; }
    for (;;) {
        unsigned char c = (unsigned char)*s;
        if (c == '\0' || c < 0x20) { ps->p = s; fail(ps, "unterminated string"); free(out); return NULL; }
        if (c == '"') { s++; break; }
        if (c != '\\') { out[n++] = (char)c; s++; continue; }
        s++;
        switch (*s) {
        case '"': out[n++] = '"'; break;
        case '\\': out[n++] = '\\'; break;
        case '/': out[n++] = '/'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'n': out[n++] = '\n'; break;
        case 'r': out[n++] = '\r'; break;
        case 't': out[n++] = '\t'; break;
        case 'u': {
            unsigned cp;
            if (!hex4(s + 1, &cp)) { ps->p = s; fail(ps, "bad \\u escape"); free(out); return NULL; }
            s += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (s[1] != '\\' || s[2] != 'u' || !hex4(s + 3, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                    ps->p = s; fail(ps, "unpaired surrogate"); free(out); return NULL;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                s += 6;
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                ps->p = s; fail(ps, "unpaired surrogate"); free(out); return NULL;
            }
            if (cp == 0) { ps->p = s; fail(ps, "NUL in string"); free(out); return NULL; }
            n += put_utf8(out + n, cp);
            break;
        }
        default: ps->p = s; fail(ps, "bad escape"); free(out); return NULL;
        }
        s++;
    }
    out[n] = '\0';
    ps->p = s;
    return out;
}

static json *parse_value(parser *ps, int depth);

static json *parse_container(parser *ps, int depth, json_type type) {
    char close = type == JSON_ARRAY ? ']' : '}';
    json *v = new_value(ps, type);
    if (!v) return NULL;
    ps->p++;
    skip_ws(ps);
    if (*ps->p == close) { ps->p++; return v; }
    for (;;) {
        char *key = NULL;
        skip_ws(ps);
        if (type == JSON_OBJECT) {
            if (*ps->p != '"') { fail(ps, "expected a key"); break; }
            key = parse_string(ps);
            if (!key) break;
            skip_ws(ps);
            if (*ps->p != ':') { fail(ps, "expected ':'"); free(key); break; }
            ps->p++;
        }
        json *item = parse_value(ps, depth + 1);
        if (!item) { free(key); break; }
        if (!push_item(ps, v, item, key)) { json_free(item); free(key); break; }
        skip_ws(ps);
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == close) { ps->p++; return v; }
        fail(ps, "expected ',' or a closing bracket");
        break;
    }
    json_free(v);
    return NULL;
}

static json *parse_number(parser *ps) {
    const char *start = ps->p;
    const char *s = start;
    int integer = 1;
    if (*s == '-') s++;
    if (*s < '0' || *s > '9') { fail(ps, "bad number"); return NULL; }
    while (*s >= '0' && *s <= '9') s++;
    if (*s == '.') { integer = 0; s++; while (*s >= '0' && *s <= '9') s++; }
    if (*s == 'e' || *s == 'E') {
        integer = 0; s++;
        if (*s == '+' || *s == '-') s++;
        while (*s >= '0' && *s <= '9') s++;
    }
    json *v = new_value(ps, JSON_NUMBER);
    if (!v) return NULL;
    v->number = strtod(start, NULL);
    if (integer) {
        errno = 0;
        v->integer = strtoll(start, NULL, 10);
        v->is_integer = errno == 0;
    }
    ps->p = s;
    return v;
}

static json *parse_value(parser *ps, int depth) {
    if (depth > JSON_MAX_DEPTH) { fail(ps, "nested too deeply"); return NULL; }
    skip_ws(ps);
    switch (*ps->p) {
    case '{': return parse_container(ps, depth, JSON_OBJECT);
    case '[': return parse_container(ps, depth, JSON_ARRAY);
    case '"': {
        char *s = parse_string(ps);
        if (!s) return NULL;
        json *v = new_value(ps, JSON_STRING);
        if (!v) { free(s); return NULL; }
        v->string = s;
        return v;
    }
    case 't':
    case 'f':
    case 'n': {
        const char *words[] = {"true", "false", "null"};
        for (int i = 0; i < 3; i++) {
            size_t len = strlen(words[i]);
            if (strncmp(ps->p, words[i], len) == 0) {
                json *v = new_value(ps, i == 2 ? JSON_NULL : JSON_BOOL);
                if (v) v->boolean = i == 0;
                ps->p += len;
                return v;
            }
        }
        fail(ps, "bad literal");
        return NULL;
    }
    default: return parse_number(ps);
    }
}

json *json_parse(const char *text, char *err, size_t err_len) {
    parser ps = {text, err, err_len, 0};
    json *v = parse_value(&ps, 0);
    if (!v) return NULL;
    skip_ws(&ps);
    if (*ps.p != '\0') { fail(&ps, "trailing characters"); json_free(v); return NULL; }
    return v;
}

json *json_parse_file(const char *path, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, err_len, "cannot open %s", path); return NULL; }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
        if (n + 1 == cap) {
            char *bigger = realloc(buf, cap * 2);
            if (!bigger) { free(buf); buf = NULL; break; }
            buf = bigger;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) { snprintf(err, err_len, "out of memory reading %s", path); return NULL; }
    buf[n] = '\0';
    if (strlen(buf) != n) { free(buf); snprintf(err, err_len, "NUL byte in %s", path); return NULL; }
    json *v = json_parse(buf, err, err_len);
    free(buf);
    return v;
}

void json_free(json *v) {
    if (!v) return;
    for (size_t i = 0; i < v->count; i++) {
        json_free(v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
    free(v);
}

const json *json_get(const json *o, const char *key) {
    if (!o || o->type != JSON_OBJECT) return NULL;
    for (size_t i = 0; i < o->count; i++) {
        if (strcmp(o->keys[i], key) == 0) return o->items[i];
    }
    return NULL;
}

int json_equal(const json *a, const json *b) {
    if (!a || !b) return a == b;
    if (a->type != b->type) return 0;
    switch (a->type) {
    case JSON_NULL: return 1;
    case JSON_BOOL: return a->boolean == b->boolean;
    case JSON_NUMBER:
        if (a->is_integer && b->is_integer) return a->integer == b->integer;
        return a->number == b->number;
    case JSON_STRING: return strcmp(a->string, b->string) == 0;
    case JSON_ARRAY:
        if (a->count != b->count) return 0;
        for (size_t i = 0; i < a->count; i++) {
            if (!json_equal(a->items[i], b->items[i])) return 0;
        }
        return 1;
    case JSON_OBJECT:
        if (a->count != b->count) return 0;
        for (size_t i = 0; i < a->count; i++) {
            if (!json_equal(a->items[i], json_get(b, a->keys[i]))) return 0;
        }
        return 1;
    }
    return 0;
}

static void append(char *buf, size_t len, size_t *at, const char *text) {
    int n = snprintf(buf + *at, len - *at, "%s", text);
    if (n > 0) *at = *at + (size_t)n < len ? *at + (size_t)n : len - 1;
}

static void render(const json *v, char *buf, size_t len, size_t *at) {
    char tmp[64];
    switch (v->type) {
    case JSON_NULL: append(buf, len, at, "null"); break;
    case JSON_BOOL: append(buf, len, at, v->boolean ? "true" : "false"); break;
    case JSON_NUMBER:
        if (v->is_integer) snprintf(tmp, sizeof tmp, "%lld", v->integer);
        else snprintf(tmp, sizeof tmp, "%g", v->number);
        append(buf, len, at, tmp);
        break;
    case JSON_STRING:
        append(buf, len, at, "\"");
        append(buf, len, at, v->string);
        append(buf, len, at, "\"");
        break;
    case JSON_ARRAY:
    case JSON_OBJECT:
        append(buf, len, at, v->type == JSON_ARRAY ? "[" : "{");
        for (size_t i = 0; i < v->count; i++) {
            if (i) append(buf, len, at, ",");
            if (v->keys) { append(buf, len, at, v->keys[i]); append(buf, len, at, ":"); }
            render(v->items[i], buf, len, at);
        }
        append(buf, len, at, v->type == JSON_ARRAY ? "]" : "}");
        break;
    }
}

void json_render(const json *v, char *buf, size_t len) {
    size_t at = 0;
    if (!len) return;
    buf[0] = '\0';
    if (v) render(v, buf, len, &at);
    else append(buf, len, &at, "(missing)");
}
