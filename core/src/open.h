/*
 * What open.c shares with the files above it: the one way tilejit's export
 * text files (MANIFEST, signature.tj, torch_op.txt) are read. Lines end at a
 * newline (a trailing carriage return dropped); fields are runs of characters
 * other than spaces and tabs; a text field is the rest of its line as written.
 */
#ifndef TILEJIT_OPEN_H_
#define TILEJIT_OPEN_H_

#include <stdint.h>

#define TJ__MAX_TOKENS 512

/* A line split in place into whitespace-separated tokens. */
typedef struct {
  char *tok[TJ__MAX_TOKENS];
  int32_t n;
  const char *rest[TJ__MAX_TOKENS]; /* the whole line from token i on, for text fields */
} tj__line_tokens;

/* The line (from 1) of the first NUL byte of `text`, or 0: a text file holding
 * one is refused by line. */
int tj__nul_line(const char *text, int64_t size);

/* Splits `line` in place; `whole` is a copy of it made before, which rest[]
 * points into. */
void tj__split(char *line, const char *whole, tj__line_tokens *t);

/* The next line of the text at *cursor (NUL-terminated in place), or NULL at
 * the end. */
char *tj__next_line(char **cursor);

/* 1 and *out when `s` is a whole decimal integer in [lo, hi], else 0. */
int tj__parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out);

#endif /* TILEJIT_OPEN_H_ */
