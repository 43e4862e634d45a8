/* A small, strict JSON reader for the test programs (scenario files, harness replies). */
#ifndef IRONLOCK_TEST_JSON_H
#define IRONLOCK_TEST_JSON_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } json_type;

typedef struct json {
    json_type type;
    int boolean;            /* JSON_BOOL */
    double number;          /* JSON_NUMBER */
    int is_integer;         /* JSON_NUMBER without fraction or exponent */
    long long integer;      /* JSON_NUMBER when is_integer */
    char *string;           /* JSON_STRING (UTF-8, NUL-terminated; no embedded NUL allowed) */
    size_t count;           /* JSON_ARRAY / JSON_OBJECT: number of items */
    struct json **items;    /* JSON_ARRAY / JSON_OBJECT: values */
    char **keys;            /* JSON_OBJECT: keys */
} json;

/* Parses a whole document; NULL on error with a message in err (if not NULL). */
json *json_parse(const char *text, char *err, size_t err_len);
/* Reads and parses a file. */
json *json_parse_file(const char *path, char *err, size_t err_len);
void json_free(json *value);
/* Member `key` of an object, or NULL. */
const json *json_get(const json *object, const char *key);
/* Structural equality (numbers compared by value). */
int json_equal(const json *a, const json *b);
/* A short rendering for messages (into buf, truncated). */
void json_render(const json *value, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
