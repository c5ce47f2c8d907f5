/*
 * encode.c - hex and base64 (RFC 4648 standard alphabet, '=' padding) for
 * printing records and for reading them from text input.  Pure functions:
 * no I/O, no allocation.
 *
 * The decoders are strict so that decode(encode(x)) == x is the only way to
 * spell x: hex accepts either case but nothing else; base64 wants a length
 * that is a multiple of 4, padding only at the end, and zero unused bits.
 */
#include "config.h"

#include <stdio.h>

#include "cli/internal.h"

static const char hex_digits[] = "0123456789abcdef";
static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void cli_hex_encode(const unsigned char *in, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hex_digits[in[i] >> 4];
    out[2 * i + 1] = hex_digits[in[i] & 15];
  }
}

static int hex_value(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Describes byte c for a message: printable characters quoted, others as
 * a hex escape. */
static void describe(unsigned char c, char *out, size_t size) {
  if (c >= 0x20 && c < 0x7f && c != '\'')
    snprintf(out, size, "'%c'", c);
  else
    snprintf(out, size, "byte 0x%02x", c);
}

bool cli_hex_decode(const char *in, size_t n, unsigned char *out,
                    size_t *outn, char *err, size_t errsize) {
  char what[16];
  for (size_t i = 0; i < n; i++) {
    if (hex_value((unsigned char)in[i]) < 0) {
      describe((unsigned char)in[i], what, sizeof what);
      snprintf(err, errsize, "invalid hex digit %s at column %zu", what,
               i + 1);
      return false;
    }
  }
  if (n % 2 != 0) {
    snprintf(err, errsize, "odd number of hex digits (%zu)", n);
    return false;
  }
  for (size_t i = 0; i < n / 2; i++)
    out[i] = (unsigned char)(hex_value((unsigned char)in[2 * i]) << 4 |
                             hex_value((unsigned char)in[2 * i + 1]));
  *outn = n / 2;
  return true;
}

size_t cli_base64_length(size_t n) { return (n + 2) / 3 * 4; }

void cli_base64_encode(const unsigned char *in, size_t n, char *out) {
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8 | in[i + 2];
    *out++ = b64_alphabet[v >> 18];
    *out++ = b64_alphabet[v >> 12 & 63];
    *out++ = b64_alphabet[v >> 6 & 63];
    *out++ = b64_alphabet[v & 63];
  }
  if (n - i == 1) {
    unsigned v = (unsigned)in[i] << 16;
    *out++ = b64_alphabet[v >> 18];
    *out++ = b64_alphabet[v >> 12 & 63];
    *out++ = '=';
    *out++ = '=';
  } else if (n - i == 2) {
    unsigned v = (unsigned)in[i] << 16 | (unsigned)in[i + 1] << 8;
    *out++ = b64_alphabet[v >> 18];
    *out++ = b64_alphabet[v >> 12 & 63];
    *out++ = b64_alphabet[v >> 6 & 63];
    *out++ = '=';
  }
}

static int b64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool cli_base64_decode(const char *in, size_t n, unsigned char *out,
                       size_t *outn, char *err, size_t errsize) {
  char what[16];
  /* Padding: at most two '=' and only at the very end. */
  size_t pad = 0;
  while (pad < 2 && pad < n && in[n - 1 - pad] == '=') pad++;
  size_t data = n - pad;
  for (size_t i = 0; i < data; i++) {
    if (b64_value((unsigned char)in[i]) < 0) {
      describe((unsigned char)in[i], what, sizeof what);
      snprintf(err, errsize, "invalid base64 character %s at column %zu",
               what, i + 1);
      return false;
    }
  }
  if (n % 4 != 0) {
    snprintf(err, errsize,
             "base64 length %zu is not a multiple of 4 (padding missing?)", n);
    return false;
  }
  size_t o = 0;
  for (size_t i = 0; i < n; i += 4) {
    /* Positions at or past `data` are '=' (only in the last group). */
    unsigned v = 0;
    for (size_t k = 0; k < 4; k++)
      v = v << 6 |
          (i + k < data ? (unsigned)b64_value((unsigned char)in[i + k]) : 0);
    size_t bytes = i + 4 <= data ? 3 : data - i - 1;
    out[o++] = (unsigned char)(v >> 16);
    if (bytes >= 2) out[o++] = (unsigned char)(v >> 8);
    if (bytes >= 3) out[o++] = (unsigned char)v;
    if ((bytes == 1 && (v & 0xffff)) || (bytes == 2 && (v & 0xff))) {
      snprintf(err, errsize,
               "non-zero unused bits before the base64 padding");
      return false;
    }
  }
  *outn = o;
  return true;
}
