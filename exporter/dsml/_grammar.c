/*
 * exporter.dsml._grammar: the DSML grammar pass of one content channel in C.
 *
 * Why it exists: on damaged output (the case the grader exists for) the canonical fast path
 * gives up and the general grammar runs: the tokenizer (tokens.py) builds one object per tag
 * and the state machine (structure.py) makes several Python calls per tag. Both were ~70% of
 * the time to grade a damaged sample, twice what SGLang's own detector takes to parse it. Here
 * the tags stay C structs and the machine is a switch; Python is called back only where the
 * Python code itself is the authority: a reason's report, markdown quoting, JSON decoding of a
 * value and a tool's schema check.
 *
 * Contract: parse() returns exactly what structure.parse_channel_python returns, and reports
 * exactly the same reasons with the same offsets and details in the same order; events()
 * returns what tokens.scan returns. tests/dsml/test_grammar_native.py holds them equal on the
 * corpora, on every damage class, at the tokenizer's length limits and under hypothesis. The
 * Python code is the specification and the fallback (the CPython json/_json pattern); a
 * change to the grammar is made there first. The literal tag and token names below are
 * DSML's (exporter/dsml/markers.py); a test compares them with markers.py.
 *
 * Safety: every read goes through at() or lit_n(), which check the str's bounds, or through
 * find_ch()'s typed loops, bounded by its length; the event array is heap-allocated, bounded by
 * the caller's limit and freed on every path. Work is linear in the text: each tag's attribute
 * scan is bounded by MAX_TAG_CHARS, and where a match fails it skips the rest of the word (a
 * later start inside it fails the same way, so the result is the regex's).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
} Text;

#define NOCH 0x110000U /* not a character: what at() returns outside the text */
#define BAR 0xFF5CU    /* FULLWIDTH VERTICAL LINE */
#define LOW 0x2581U    /* LOWER ONE EIGHTH BLOCK */

static inline Py_UCS4 at(const Text *t, Py_ssize_t i)
{
    return (i >= 0 && i < t->n) ? PyUnicode_READ(t->kind, t->data, i) : NOCH;
}

/* text[pos:pos+len] == s for an ASCII literal s of length len (see LIT) */
static int lit_n(const Text *t, Py_ssize_t pos, const char *s, Py_ssize_t len)
{
    if (pos < 0 || pos > t->n - len) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < len; k++) {
        if (PyUnicode_READ(t->kind, t->data, pos + k) != (Py_UCS4)(unsigned char)s[k]) {
            return 0;
        }
    }
    return 1;
}
#define LIT(t, pos, s) lit_n((t), (pos), (s), (Py_ssize_t)(sizeof(s) - 1))

static int lit(const Text *t, Py_ssize_t pos, const char *s)
{
    return lit_n(t, pos, s, (Py_ssize_t)strlen(s));
}

/* text[a:b] == s */
static int slice_is(const Text *t, Py_ssize_t a, Py_ssize_t b, const char *s)
{
    return b - a == (Py_ssize_t)strlen(s) && lit_n(t, a, s, b - a);
}

static int same_slices(const Text *t, Py_ssize_t a, Py_ssize_t b, Py_ssize_t c, Py_ssize_t d)
{
    if (b - a != d - c) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < b - a; k++) {
        if (at(t, a + k) != at(t, c + k)) {
            return 0;
        }
    }
    return 1;
}

/* the first ASCII ch at or after start, or -1: one typed loop per string kind (memchr for
 * 1-byte strings), since the grammar's two searches ("<" and "DSML") read most characters */
static Py_ssize_t find_ch(const Text *t, char ch, Py_ssize_t start)
{
    if (start < 0) {
        start = 0;
    }
    if (start >= t->n) {
        return -1;
    }
    switch (t->kind) {
    case PyUnicode_1BYTE_KIND: {
        const Py_UCS1 *d = (const Py_UCS1 *)t->data;
        const void *hit = memchr(d + start, ch, (size_t)(t->n - start));
        return hit ? (const Py_UCS1 *)hit - d : -1;
    }
    case PyUnicode_2BYTE_KIND: {
        const Py_UCS2 *d = (const Py_UCS2 *)t->data;
        for (Py_ssize_t i = start; i < t->n; i++) {
            if (d[i] == (Py_UCS2)ch) {
                return i;
            }
        }
        return -1;
    }
    default: {
        const Py_UCS4 *d = (const Py_UCS4 *)t->data;
        for (Py_ssize_t i = start; i < t->n; i++) {
            if (d[i] == (Py_UCS4)ch) {
                return i;
            }
        }
        return -1;
    }
    }
}

static Py_ssize_t find_dsml(const Text *t, Py_ssize_t start)
{
    for (Py_ssize_t i = find_ch(t, 'D', start); i >= 0; i = find_ch(t, 'D', i + 1)) {
        if (LIT(t, i + 1, "SML")) {
            return i;
        }
    }
    return -1;
}

static inline int is_space(Py_UCS4 c) { return c != NOCH && Py_UNICODE_ISSPACE(c); }
static inline int is_word(Py_UCS4 c) { return c == '_' || (c != NOCH && Py_UNICODE_ISALNUM(c)); }
static inline int ascii_alpha_(Py_UCS4 c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}
static inline int ascii_alnum_(Py_UCS4 c) { return ascii_alpha_(c) || (c >= '0' && c <= '9'); }

/* ---- DSML's names (markers.py) ------------------------------------------------------------- */

enum { K_BLOCK, K_INVOKE, K_PARAMETER, K_UNKNOWN };
enum { V_CANONICAL, V_ASCII, V_DOUBLED, V_SPACED, V_DAMAGED };
enum { G_NONE = -1, G_V32 = 0, G_V4 = 1, G_V41 = 2 };

typedef struct {
    const char *name;
    int kind;
    int grammar; /* the dialect a block name belongs to, else G_NONE */
} TagName;

/* tokens._LT_EVENTS' alternation; no name is a prefix of another, so order is free */
static const TagName TAG_NAMES[] = {
    {"tool_calls", K_BLOCK, G_V4},
    {"function_calls", K_BLOCK, G_V32},
    {"calls", K_BLOCK, G_V41},
    {"invoke", K_INVOKE, G_NONE},
    {"parameter", K_PARAMETER, G_NONE},
};
#define N_TAG_NAMES 5
static const char *GRAMMAR_NAMES[] = {"v3.2", "v4", "v4.1"};
static const char *BLOCK_OF[] = {"function_calls", "tool_calls", "calls"};
/* markers.ASCII_SPECIAL_NAMES, as UTF-8 */
static const char *ASCII_SPECIAL[] = {"end\xe2\x96\x81of\xe2\x96\x81sentence",
                                      "begin\xe2\x96\x81of\xe2\x96\x81sentence", "User",
                                      "Assistant"};
#define N_ASCII_SPECIAL 4

static inline int spaced_grammar(int g) { return g == G_V41; }

/* index into TAG_NAMES of text[a:b], or -1 */
static int tag_name_of(const Text *t, Py_ssize_t a, Py_ssize_t b)
{
    for (int k = 0; k < N_TAG_NAMES; k++) {
        if (slice_is(t, a, b, TAG_NAMES[k].name)) {
            return k;
        }
    }
    return -1;
}

/* ---- events (tokens.py) -------------------------------------------------------------------- */

/* tokens.MAX_TAG_CHARS and the bounds written in tokens._LT_EVENTS / _NAME */
#define MAX_TAG_CHARS 512
#define MAX_ATTR_NAME 256
#define MAX_FLAG 16
#define MAX_SPECIAL 64
#define MAX_IDENT 64
#define MAX_NAME 256 /* structure.MAX_NAME */
#define MAX_BARS 3
#define MAX_SPACES 8

enum { EV_TAG, EV_SPECIAL, EV_THINK, EV_BARE };

enum {
    P_NO_ATTRS,   /* attr_malformed: this tag takes no attributes */
    P_NO_NAME,    /* name_invalid: no name attribute */
    P_FLAG_NONE,  /* string_flag_missing */
    P_FLAG_BAD,   /* string_flag_invalid: string=<repr of the flag's first 16 characters> */
    P_SELFC,      /* attr_malformed: self-closing parameter */
    P_NOT_CANON,  /* attr_malformed: attributes not in canonical form */
    P_NOT_CLOSED, /* attr_malformed: tag not closed by `>` on its line */
};
#define MAX_PROBLEMS 8

typedef struct {
    unsigned char type, closing, variant, complete, self_closing, kind, spaced, ascii;
    signed char name_id; /* index into TAG_NAMES, -1 for any other name */
    unsigned char nprob;
    unsigned char probs[MAX_PROBLEMS];
    Py_ssize_t start, end;
    Py_ssize_t name_a, name_b; /* the tag's name (or the special token's) */
    Py_ssize_t an_a, an_b;     /* name="..." attribute; an_a < 0: none */
    Py_ssize_t fl_a, fl_b;     /* string="..." attribute; fl_a < 0: none */
} Ev;

static void add_problem(Ev *ev, int p)
{
    if (ev->nprob < MAX_PROBLEMS) {
        ev->probs[ev->nprob++] = (unsigned char)p;
    }
}

/* tokens._check_attrs: compare the attribute text text[a:b] with the one canonical form */
static int check_attrs(const Text *t, int kind, int closing, Py_ssize_t a, Py_ssize_t b,
                       int selfc, Ev *ev)
{
    ev->an_a = ev->fl_a = -1;
    if (kind == K_UNKNOWN) {
        return 0; /* an unknown tag is reported as such; its attributes mean nothing */
    }
    if (closing || kind == K_BLOCK) {
        int blank = 1;
        for (Py_ssize_t i = a; i < b; i++) {
            if (!is_space(at(t, i))) {
                blank = 0;
                break;
            }
        }
        if (!blank || selfc) {
            add_problem(ev, P_NO_ATTRS);
        }
        return 0;
    }
    /* re.finditer of tokens._ATTR over text[a:b] */
    typedef struct {
        Py_ssize_t ka, kb;
    } Key;
    Key local[32];
    Key *keys = local;
    Py_ssize_t cap = 32, npairs = 0;
    int dup = 0;
    Py_ssize_t p = a;
    while (p < b) {
        if (!ascii_alpha_(at(t, p))) {
            p++;
            continue;
        }
        Py_ssize_t q = p + 1;
        while (q < b && (is_word(at(t, q)) || at(t, q) == '-')) {
            q++;
        }
        Py_ssize_t key_end = q, va, vb, end;
        /* a failed match fails at every later start inside the same word: skip the word */
        while (q < b && is_space(at(t, q))) {
            q++;
        }
        if (q >= b || at(t, q) != '=') {
            p = key_end;
            continue;
        }
        q++;
        while (q < b && is_space(at(t, q))) {
            q++;
        }
        Py_UCS4 c = q < b ? at(t, q) : NOCH;
        if (c == '"' || c == '\'') {
            Py_ssize_t r = q + 1;
            while (r < b && at(t, r) != c) {
                r++;
            }
            if (r >= b) {
                p = key_end;
                continue;
            }
            va = q + 1;
            vb = r;
            end = r + 1;
        } else {
            Py_ssize_t r = q;
            while (r < b) {
                Py_UCS4 v = at(t, r);
                if (is_space(v) || v == '"' || v == '\'' || v == '=' || v == '/') {
                    break;
                }
                r++;
            }
            if (r == q) {
                p = key_end;
                continue;
            }
            va = q;
            vb = r;
            end = r;
        }
        /* dict(pairs): the last value of a key wins; a repeated key is not canonical */
        if (!dup) {
            for (Py_ssize_t k = 0; k < npairs; k++) {
                if (same_slices(t, keys[k].ka, keys[k].kb, p, key_end)) {
                    dup = 1;
                    break;
                }
            }
        }
        if (!dup) {
            if (npairs == cap) {
                Py_ssize_t grown_cap = 2 * cap;
                Key *grown = keys == local ? PyMem_Malloc(sizeof(Key) * (size_t)grown_cap)
                                           : PyMem_Realloc(keys, sizeof(Key) * (size_t)grown_cap);
                if (grown == NULL) {
                    if (keys != local) {
                        PyMem_Free(keys);
                    }
                    PyErr_NoMemory();
                    return -1;
                }
                if (keys == local) {
                    memcpy(grown, local, sizeof local);
                }
                keys = grown;
                cap = grown_cap;
            }
            keys[npairs].ka = p;
            keys[npairs].kb = key_end;
            npairs++;
        }
        if (slice_is(t, p, key_end, "name")) {
            ev->an_a = va;
            ev->an_b = vb;
        } else if (slice_is(t, p, key_end, "string") && kind == K_PARAMETER) {
            ev->fl_a = va;
            ev->fl_b = vb;
        }
        p = end;
    }
    if (keys != local) {
        PyMem_Free(keys);
    }
    if (ev->an_a < 0) {
        add_problem(ev, P_NO_NAME);
    }
    if (kind == K_PARAMETER) {
        if (ev->fl_a < 0) {
            add_problem(ev, P_FLAG_NONE);
        } else if (!slice_is(t, ev->fl_a, ev->fl_b, "true") &&
                   !slice_is(t, ev->fl_a, ev->fl_b, "false")) {
            add_problem(ev, P_FLAG_BAD);
        }
        if (selfc) {
            add_problem(ev, P_SELFC);
        }
    }
    /* the canonical rendering of what is present: ` name="N"` then ` string="F"`, each only
     * when present (a parameter with a flag and no name renders as ` string="F"` alone) */
    Py_ssize_t pos = a;
    int canon = 1;
    if (ev->an_a >= 0) {
        Py_ssize_t nlen = ev->an_b - ev->an_a;
        canon = LIT(t, pos, " name=\"") && pos + 7 + nlen < b &&
                same_slices(t, pos + 7, pos + 7 + nlen, ev->an_a, ev->an_b) &&
                at(t, pos + 7 + nlen) == '"';
        pos += 8 + nlen;
    }
    if (canon && kind == K_PARAMETER && ev->fl_a >= 0) {
        Py_ssize_t flen = ev->fl_b - ev->fl_a;
        canon = LIT(t, pos, " string=\"") && pos + 9 + flen < b &&
                same_slices(t, pos + 9, pos + 9 + flen, ev->fl_a, ev->fl_b) &&
                at(t, pos + 9 + flen) == '"';
        pos += 10 + flen;
    }
    canon = canon && pos == b;
    if (!canon || dup) {
        add_problem(ev, P_NOT_CANON);
    }
    return 0;
}

static void tag_kind(Ev *ev, const Text *t)
{
    int id = tag_name_of(t, ev->name_a, ev->name_b);
    ev->name_id = (signed char)id;
    ev->kind = (unsigned char)(id < 0 ? K_UNKNOWN : TAG_NAMES[id].kind);
}

static int is_bar(Py_UCS4 c) { return c == BAR || c == '|'; }

/* tokens._classify: the DSML at d as a damaged or dialect marker (1), or prose (0) */
static int classify(const Text *t, Py_ssize_t d, Ev *ev)
{
    memset(ev, 0, sizeof *ev);
    Py_ssize_t i = d;
    int nb = 0, bar_before = 0;
    Py_UCS4 b0 = 0;
    while (i > 0 && is_bar(at(t, i - 1)) && nb < MAX_BARS) {
        i--;
        b0 = at(t, i);
        bar_before |= b0 == BAR;
        nb++;
    }
    int closing = i > 0 && at(t, i - 1) == '/';
    if (closing) {
        i--;
    }
    int has_angle = i > 0 && at(t, i - 1) == '<';
    if (has_angle) {
        i--;
    }
    Py_ssize_t start = i, j = d + 4;
    int na = 0, bar_after = 0;
    Py_UCS4 a0 = 0;
    while (j < t->n && is_bar(at(t, j)) && na < MAX_BARS) {
        if (na == 0) {
            a0 = at(t, j);
        }
        bar_after |= at(t, j) == BAR;
        na++;
        j++;
    }
    int spaces = 0;
    while (j < t->n && at(t, j) == ' ' && spaces < MAX_SPACES) {
        spaces++;
        j++;
    }
    if (!(has_angle || bar_before || bar_after || (nb && na))) {
        return 0; /* the word "DSML" in prose */
    }
    Py_ssize_t name_a = j;
    if (ascii_alpha_(at(t, j))) {
        j++;
        while (j - name_a < MAX_IDENT && ascii_alnum_(at(t, j))) {
            j++;
        }
    }
    int variant;
    if (nb == 1 && na == 1 && b0 == BAR && a0 == BAR && has_angle && spaces <= 1) {
        variant = V_CANONICAL;
    } else if (nb == 1 && na == 1 && b0 == '|' && a0 == '|' && has_angle && spaces <= 1) {
        variant = V_ASCII;
    } else if (nb >= 2 || na >= 2) {
        variant = V_DOUBLED;
    } else if (has_angle && spaces && nb == 1 && na == 1) {
        variant = V_SPACED;
    } else {
        variant = V_DAMAGED;
    }
    Py_ssize_t q = j;
    while (q < t->n && q - j < MAX_TAG_CHARS) {
        Py_UCS4 c = at(t, q);
        if (c == '<' || c == '>' || c == '\n') {
            break;
        }
        q++;
    }
    int complete, malformed = 0;
    Py_ssize_t end, body_end = q;
    if (q < t->n && at(t, q) == '>') {
        complete = 1;
        end = q + 1;
    } else if (q >= t->n) {
        complete = 0;
        end = q;
    } else { /* stopped at `<`, a newline or the length limit */
        complete = 1;
        end = q;
        malformed = 1;
    }
    int selfc = body_end > j && at(t, body_end - 1) == '/';
    if (selfc) {
        body_end--;
    }
    ev->type = EV_TAG;
    ev->start = start;
    ev->end = end;
    ev->closing = (unsigned char)closing;
    ev->name_a = name_a;
    ev->name_b = j;
    ev->variant = (unsigned char)variant;
    ev->complete = (unsigned char)complete;
    ev->self_closing = (unsigned char)selfc;
    tag_kind(ev, t);
    ev->an_a = ev->fl_a = -1;
    if (complete && check_attrs(t, ev->kind, closing, j, body_end, selfc, ev) < 0) {
        return -1;
    }
    if (malformed) {
        add_problem(ev, P_NOT_CLOSED);
    }
    ev->spaced = (unsigned char)(spaces == 1 && (variant == V_CANONICAL || variant == V_ASCII));
    return 1;
}

/* one match of tokens._LT_EVENTS at the "<" at p: 1 (ev filled), 0 (no match) */
static PyObject *ASCII_SPECIAL_STR[N_ASCII_SPECIAL];

typedef enum { M_NONE, M_CANON, M_SPECIAL, M_ASPECIAL, M_THINK, M_BARE } Match;

/* `[^"<>\n]{0,max}"` from a: the value is text[*va:*vb]; returns the position after the closing
 * quote, or -1 when the value is longer or ends otherwise */
static Py_ssize_t quoted_value(const Text *t, Py_ssize_t a, Py_ssize_t max, Py_ssize_t *va,
                               Py_ssize_t *vb)
{
    Py_ssize_t r = a;
    while (r - a < max) {
        Py_UCS4 v = at(t, r);
        if (v == '"' || v == '<' || v == '>' || v == '\n' || v == NOCH) {
            break;
        }
        r++;
    }
    if (at(t, r) != '"') {
        return -1;
    }
    *va = a;
    *vb = r;
    return r + 1;
}

static Match match_lt(const Text *t, Py_ssize_t p, Py_ssize_t *mend, Ev *ev)
{
    Py_UCS4 c1 = at(t, p + 1);
    if (!(c1 == '/' || c1 == BAR || c1 == '|' || c1 == 't' || c1 == 'i' || c1 == 'p' ||
          c1 == 'f')) {
        return M_NONE;
    }
    memset(ev, 0, sizeof *ev);
    /* canon: (/?)｜DSML｜( ?)(name)( name="[^"<>\n]{0,256}")?( string="[^"<>\n]{0,16}")?(/?)> */
    {
        Py_ssize_t q = p + 1;
        int closing = 0, spaced = 0;
        if (at(t, q) == '/') {
            closing = 1;
            q++;
        }
        if (at(t, q) == BAR && LIT(t, q + 1, "DSML") && at(t, q + 5) == BAR) {
            q += 6;
            if (at(t, q) == ' ') {
                spaced = 1;
                q++;
            }
            int id = -1;
            for (int k = 0; k < N_TAG_NAMES; k++) {
                if (lit(t, q, TAG_NAMES[k].name)) {
                    id = k;
                    break;
                }
            }
            if (id >= 0) {
                Py_ssize_t name_a = q, name_b = q + (Py_ssize_t)strlen(TAG_NAMES[id].name);
                q = name_b;
                ev->an_a = ev->fl_a = -1;
                int ok = 1;
                if (LIT(t, q, " name=\"")) {
                    q = quoted_value(t, q + 7, MAX_ATTR_NAME, &ev->an_a, &ev->an_b);
                    ok = q >= 0;
                }
                if (ok && LIT(t, q, " string=\"")) {
                    q = quoted_value(t, q + 9, MAX_FLAG, &ev->fl_a, &ev->fl_b);
                    ok = q >= 0;
                }
                int selfc = 0;
                if (ok && at(t, q) == '/') {
                    selfc = 1;
                    q++;
                }
                if (ok && at(t, q) == '>') {
                    ev->type = EV_TAG;
                    ev->start = p;
                    ev->end = q + 1;
                    ev->closing = (unsigned char)closing;
                    ev->name_a = name_a;
                    ev->name_b = name_b;
                    ev->name_id = (signed char)id;
                    ev->kind = (unsigned char)TAG_NAMES[id].kind;
                    ev->variant = V_CANONICAL;
                    ev->complete = 1;
                    ev->self_closing = (unsigned char)selfc;
                    ev->spaced = (unsigned char)spaced;
                    *mend = q + 1;
                    return M_CANON;
                }
            }
        }
    }
    /* special: ｜[^｜<>\n]{1,64}｜>  and aspecial: \|[^|<>\s]{1,64}\|> */
    if (c1 == BAR || c1 == '|') {
        Py_ssize_t r = p + 2;
        while (r - (p + 2) < MAX_SPECIAL) {
            Py_UCS4 v = at(t, r);
            if (v == NOCH || v == c1 || v == '<' || v == '>' ||
                (c1 == BAR ? v == '\n' : is_space(v))) {
                break;
            }
            r++;
        }
        if (r > p + 2 && at(t, r) == c1 && at(t, r + 1) == '>') {
            ev->start = p;
            ev->end = r + 2;
            ev->name_a = p + 2;
            ev->name_b = r;
            *mend = r + 2;
            return c1 == BAR ? M_SPECIAL : M_ASPECIAL;
        }
    }
    /* think: /?think> */
    {
        Py_ssize_t q = p + 1;
        int closing = at(t, q) == '/';
        if (LIT(t, q + closing, "think>")) {
            ev->type = EV_THINK;
            ev->start = p;
            ev->end = q + closing + 6;
            ev->closing = (unsigned char)closing;
            *mend = ev->end;
            return M_THINK;
        }
    }
    /* bare: (invoke|parameter) name="  |  /(invoke|parameter)>  |  /?(tool_calls|function_calls)> */
    {
        Py_ssize_t q = p + 1, e = -1;
        if (LIT(t, q, "invoke name=\"")) {
            e = q + 13;
        } else if (LIT(t, q, "parameter name=\"")) {
            e = q + 16;
        } else if (LIT(t, q, "/invoke>")) {
            e = q + 8;
        } else if (LIT(t, q, "/parameter>")) {
            e = q + 11;
        } else {
            int s = at(t, q) == '/';
            if (LIT(t, q + s, "tool_calls>")) {
                e = q + s + 11;
            } else if (LIT(t, q + s, "function_calls>")) {
                e = q + s + 15;
            }
        }
        if (e >= 0) {
            ev->type = EV_BARE;
            ev->start = p;
            ev->end = e;
            *mend = e;
            return M_BARE;
        }
    }
    return M_NONE;
}

/* tokens._canonical's attribute check for a canonical tag that is not in its one spelling */
static int canonical_tag(const Text *t, Ev *ev)
{
    int fast;
    int flag_tf = ev->fl_a >= 0 && (slice_is(t, ev->fl_a, ev->fl_b, "true") ||
                                    slice_is(t, ev->fl_a, ev->fl_b, "false"));
    if (!ev->closing && ev->kind == K_PARAMETER) {
        fast = ev->an_a >= 0 && flag_tf && !ev->self_closing;
    } else if (!ev->closing && ev->kind == K_INVOKE) {
        fast = ev->an_a >= 0 && ev->fl_a < 0;
    } else {
        fast = ev->an_a < 0 && ev->fl_a < 0 && !ev->self_closing;
    }
    if (fast) {
        return 0;
    }
    /* the attribute text: from after the name to before the optional "/" and the ">" */
    Py_ssize_t b = ev->end - 1 - ev->self_closing;
    return check_attrs(t, ev->kind, ev->closing, ev->name_b, b, ev->self_closing, ev);
}

/* tokens._lt_event: 1 (ev is an event), 0 (not one), -1 (error) */
static int lt_event(const Text *t, Match kind, Ev *ev)
{
    if (kind == M_CANON) {
        return canonical_tag(t, ev) < 0 ? -1 : 1;
    }
    if (kind == M_SPECIAL || kind == M_ASPECIAL) {
        Py_ssize_t a = ev->name_a, b = ev->name_b;
        for (Py_ssize_t i = a; i + 4 <= b; i++) {
            if (LIT(t, i, "DSML")) {
                return classify(t, i, ev);
            }
        }
        ev->type = EV_SPECIAL;
        if (kind == M_SPECIAL) {
            return 1;
        }
        ev->ascii = 1;
        for (int k = 0; k < N_ASCII_SPECIAL; k++) {
            PyObject *name = ASCII_SPECIAL_STR[k];
            Py_ssize_t len = PyUnicode_GET_LENGTH(name);
            int same = len == b - a;
            for (Py_ssize_t i = 0; same && i < len; i++) {
                same = PyUnicode_READ_CHAR(name, i) == at(t, a + i);
            }
            if (same) {
                return 1;
            }
        }
        for (Py_ssize_t i = a; i < b; i++) {
            if (at(t, i) == LOW) {
                return 1;
            }
        }
        return 0;
    }
    return 1; /* think and bare are complete as matched */
}

typedef struct {
    Ev *v;
    Py_ssize_t n, cap;
} Events;

static int push(Events *es, const Ev *ev)
{
    if (es->n == es->cap) {
        Py_ssize_t cap = es->cap ? 2 * es->cap : 32;
        Ev *grown = PyMem_Realloc(es->v, sizeof(Ev) * (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        es->v = grown;
        es->cap = cap;
    }
    es->v[es->n++] = *ev;
    return 0;
}

/* tokens.scan's DSML loop: classify each "DSML" from *d that starts before bound (a DSML
 * inside the last event, which ends at *covered, is part of it); 1 when limit events are kept,
 * 0 when the DSMLs before bound are done, -1 on error */
static int classify_upto(const Text *t, Py_ssize_t bound, Py_ssize_t limit, Py_ssize_t *d,
                         Py_ssize_t *covered, Events *out)
{
    while (0 <= *d && *d < bound) {
        Ev tag;
        int r = classify(t, *d, &tag);
        if (r < 0) {
            return -1;
        }
        if (r) {
            if (push(out, &tag) < 0) {
                return -1;
            }
            *covered = tag.end;
            if (out->n >= limit) {
                return 1;
            }
        }
        *d = find_dsml(t, *d + 4 > *covered ? *d + 4 : *covered);
    }
    return 0;
}

/* tokens.scan: the events of the text in order, at most limit; 0 or -1 (error) */
static int scan_events(const Text *t, Py_ssize_t limit, Events *out)
{
    Py_ssize_t covered = 0, rpos = 0;
    Py_ssize_t d = find_dsml(t, 0);
    Ev ev;
    for (;;) {
        /* the next match of _LT_EVENTS at or after rpos (finditer resumes at a match's end) */
        Py_ssize_t start = -1, mend = 0;
        Match kind = M_NONE;
        for (Py_ssize_t p = find_ch(t, '<', rpos); p >= 0; p = find_ch(t, '<', p + 1)) {
            kind = match_lt(t, p, &mend, &ev);
            if (kind != M_NONE) {
                start = p;
                break;
            }
        }
        if (start < 0) {
            break;
        }
        rpos = mend;
        int done = classify_upto(t, start, limit, &d, &covered, out);
        if (done) {
            return done < 0 ? -1 : 0;
        }
        if (start < covered) {
            continue;
        }
        int r = lt_event(t, kind, &ev);
        if (r < 0) {
            return -1;
        }
        if (r) {
            if (push(out, &ev) < 0) {
                return -1;
            }
            if (ev.end > covered) {
                covered = ev.end;
            }
            if (out->n >= limit) {
                return 0;
            }
            if (0 <= d && d < covered) {
                d = find_dsml(t, covered);
            }
        }
    }
    return classify_upto(t, PY_SSIZE_T_MAX, limit, &d, &covered, out) < 0 ? -1 : 0;
}

/* ---- Python values --------------------------------------------------------------------------- */

static PyObject *S_EMPTY, *S_NO_NAME, *S_THINK_OPEN, *S_THINK_CLOSE;
static PyObject *GRAMMAR_STR[3], *BLOCK_STR[3];
static PyObject *VARIANT_STR[5], *KIND_STR[4], *VARIANT_REASON[5];
static PyObject *PROBLEM_CODE[7], *PROBLEM_DETAIL[7];

/* interned reason codes and fixed details, made once */
#define REASONS(X)                                                                              \
    X(special_token_leak) X(think_tag_leak) X(marker_missing) X(multiple_blocks) X(unbalanced)  \
    X(marker_spaced) X(tag_unknown) X(orphan_closer) X(bare_invoke) X(nested_tag)               \
    X(dialect_mismatch) X(version_mismatch) X(empty_block) X(name_invalid) X(param_duplicate)   \
    X(json_invalid) X(whitespace_layout) X(stray_text) X(text_after_block)
#define DECLARE(name) static PyObject *R_##name;
REASONS(DECLARE)
#undef DECLARE

static PyObject *substr(PyObject *text, Py_ssize_t a, Py_ssize_t b)
{
    if (a < 0) {
        Py_RETURN_NONE;
    }
    if (b < a) {
        b = a;
    }
    return PyUnicode_Substring(text, a, b);
}

static PyObject *problem_detail(PyObject *text, const Ev *ev, int p)
{
    if (p != P_FLAG_BAD) {
        return Py_NewRef(PROBLEM_DETAIL[p]);
    }
    Py_ssize_t b = ev->fl_b - ev->fl_a > 16 ? ev->fl_a + 16 : ev->fl_b;
    PyObject *flag = PyUnicode_Substring(text, ev->fl_a, b);
    if (flag == NULL) {
        return NULL;
    }
    PyObject *out = PyUnicode_FromFormat("string=%R", flag);
    Py_DECREF(flag);
    return out;
}

/* the event as tokens.scan's dataclass fields, for the equivalence tests */
static PyObject *event_tuple(PyObject *text, const Ev *ev)
{
    switch (ev->type) {
    case EV_TAG: {
        PyObject *problems = PyTuple_New(ev->nprob);
        if (problems == NULL) {
            return NULL;
        }
        for (int k = 0; k < ev->nprob; k++) {
            PyObject *detail = problem_detail(text, ev, ev->probs[k]);
            PyObject *pair = detail ? PyTuple_Pack(2, PROBLEM_CODE[ev->probs[k]], detail) : NULL;
            Py_XDECREF(detail);
            if (pair == NULL) {
                Py_DECREF(problems);
                return NULL;
            }
            PyTuple_SET_ITEM(problems, k, pair);
        }
        return Py_BuildValue("(snnNNOONNNNOO)", "tag", ev->start, ev->end,
                             PyBool_FromLong(ev->closing), substr(text, ev->name_a, ev->name_b),
                             VARIANT_STR[ev->variant], ev->complete ? Py_True : Py_False,
                             PyBool_FromLong(ev->self_closing), substr(text, ev->an_a, ev->an_b),
                             substr(text, ev->fl_a, ev->fl_b), problems, KIND_STR[ev->kind],
                             ev->spaced ? Py_True : Py_False);
    }
    case EV_SPECIAL:
        return Py_BuildValue("(snnNO)", "special", ev->start, ev->end,
                             substr(text, ev->name_a, ev->name_b), ev->ascii ? Py_True : Py_False);
    case EV_THINK:
        return Py_BuildValue("(snnO)", "think", ev->start, ev->end,
                             ev->closing ? Py_True : Py_False);
    default:
        return Py_BuildValue("(snnN)", "bare", ev->start, ev->end,
                             substr(text, ev->start, ev->end));
    }
}

/* ---- the machine (structure.Machine) ------------------------------------------------------- */

enum { OUT, BLOCK, INVOKE, VALUE, AFTER };

typedef struct {
    const Text *t;
    PyObject *text, *report, *covers, *check_call, *tools, *strict_json, *tool_call;
    Py_ssize_t floor; /* quoting_floor, -1 until needed */
    int grammar, length, has_gap;
    Py_ssize_t gap;
    int state;
    Py_ssize_t last;
    int has_block, block_grammar, block_spaced; /* block_spaced -1: None */
    int foreign, implicit_block;
    Py_ssize_t block_start, block_invokes;
    /* the open invoke */
    int has_invoke, inv_valid, inv_partial;
    Py_ssize_t inv_name_a, inv_name_b, inv_start; /* inv_name_a < 0: "" */
    PyObject *inv_args;
    PyObject *seen;
    /* the open parameter */
    int has_param, p_false, p_keep;
    Py_ssize_t p_name_a, p_name_b, p_value_start, p_tag_start;
    int after_reported, capped;
    /* Parsed */
    PyObject *calls, *blocks, *values;
    int open_at_end, dsml_seen;
    Py_ssize_t open_block_start;
} M;

/* append (a, b) to list: the blocks and values Parsed returns */
static int append_span(PyObject *list, Py_ssize_t a, Py_ssize_t b)
{
    PyObject *x = PyLong_FromSsize_t(a), *y = PyLong_FromSsize_t(b);
    PyObject *span = x && y ? PyTuple_Pack(2, x, y) : NULL;
    Py_XDECREF(x);
    Py_XDECREF(y);
    if (span == NULL) {
        return -1;
    }
    int r = PyList_Append(list, span);
    Py_DECREF(span);
    return r;
}

/* report(reason, start, end, detail, inside); steals detail */
static int say(M *m, PyObject *code, Py_ssize_t s, Py_ssize_t e, PyObject *detail)
{
    if (detail == NULL) {
        return -1;
    }
    PyObject *a = PyLong_FromSsize_t(s), *b = PyLong_FromSsize_t(e);
    PyObject *r = NULL;
    if (a != NULL && b != NULL) {
        int inside = m->state == BLOCK || m->state == INVOKE || m->state == VALUE;
        PyObject *args[5] = {code, a, b, detail, inside ? Py_True : Py_False};
        r = PyObject_Vectorcall(m->report, args, 5, NULL);
    }
    Py_XDECREF(a);
    Py_XDECREF(b);
    Py_DECREF(detail);
    if (r == NULL) {
        return -1;
    }
    Py_DECREF(r);
    return 0;
}

static PyObject *name_of(M *m, const Ev *ev)
{
    return PyUnicode_Substring(m->text, ev->name_a, ev->name_b);
}

static PyObject *name_or_none(M *m, const Ev *ev)
{
    return ev->name_b > ev->name_a ? name_of(m, ev) : Py_NewRef(S_NO_NAME);
}

/* Quoting._floor: the start of the line of the first backtick or tilde (every quoted region
 * starts there or later), or past the end when there is none */
static Py_ssize_t quoting_floor(const Text *t)
{
    Py_ssize_t tick = find_ch(t, '`', 0), tilde = find_ch(t, '~', 0);
    Py_ssize_t first = tick < 0 ? tilde : (tilde < 0 || tick < tilde ? tick : tilde);
    if (first < 0) {
        return t->n + 1;
    }
    while (first > 0 && at(t, first - 1) != '\n') {
        first--;
    }
    return first;
}

/* state == OUT and the position is in a code fence or span: -1 error. Quoting.covers answers;
 * below the floor nothing can be quoted, so most texts never call it. */
static int quoted(M *m, Py_ssize_t pos)
{
    if (m->state != OUT) {
        return 0;
    }
    if (m->floor < 0) {
        m->floor = quoting_floor(m->t);
    }
    if (pos < m->floor) {
        return 0;
    }
    PyObject *p = PyLong_FromSsize_t(pos);
    if (p == NULL) {
        return -1;
    }
    PyObject *r = PyObject_CallOneArg(m->covers, p);
    Py_DECREF(p);
    if (r == NULL) {
        return -1;
    }
    int out = PyObject_IsTrue(r);
    Py_DECREF(r);
    return out;
}

/* structure.name_problem of text[a:b] (a < 0: None): NULL when fine */
static const char *name_problem(const Text *t, Py_ssize_t a, Py_ssize_t b)
{
    if (a < 0 || b <= a) {
        return "empty name";
    }
    if (b - a > MAX_NAME) {
        return "name too long";
    }
    for (Py_ssize_t i = a; i < b; i++) {
        Py_UCS4 c = at(t, i);
        if (is_space(c) || c == '"' || c == '\'' || c == '<' || c == '>' || c == '`' ||
            c == '\\' || c == '|' || c < 0x20 || c == 0x7f || c == BAR) {
            return "whitespace, quote, bracket, bar or control character in name";
        }
    }
    return NULL;
}

static PyObject *clip(PyObject *text, Py_ssize_t a, Py_ssize_t b)
{
    if (b - a <= 40) {
        return PyUnicode_Substring(text, a, b);
    }
    PyObject *head = PyUnicode_Substring(text, a, a + 37);
    if (head == NULL) {
        return NULL;
    }
    PyObject *out = PyUnicode_FromFormat("%U...", head);
    Py_DECREF(head);
    return out;
}

static int after_text(M *m, Py_ssize_t s, Py_ssize_t e)
{
    if (m->after_reported) {
        return 0;
    }
    m->after_reported = 1;
    return say(m, R_text_after_block, s, e, Py_NewRef(S_EMPTY));
}

/* the first and one past the last non-space position of text[a:b] (equal when blank) */
static void strip_bounds(const Text *t, Py_ssize_t a, Py_ssize_t b, Py_ssize_t *lo, Py_ssize_t *hi)
{
    if (b > t->n) {
        b = t->n; /* a slice stops at the text's end */
    }
    if (a > b) {
        a = b;
    }
    Py_ssize_t i = a, j = b;
    while (i < j && is_space(at(t, i))) {
        i++;
    }
    while (j > i && is_space(at(t, j - 1))) {
        j--;
    }
    *lo = i;
    *hi = j;
}

static int gap(M *m, Py_ssize_t pos)
{
    if (m->has_gap && m->last <= m->gap && m->gap <= pos) {
        return 0; /* the cut removed whatever was here */
    }
    Py_ssize_t a = m->last, b = pos < a ? a : pos;
    if (b - a == 1 && at(m->t, a) == '\n') {
        return 0;
    }
    Py_ssize_t lo, hi;
    strip_bounds(m->t, a, b, &lo, &hi);
    if (lo == hi) {
        PyObject *between = PyUnicode_Substring(m->text, a, b - a > 16 ? a + 16 : b);
        PyObject *detail = between ? PyObject_Repr(between) : NULL;
        Py_XDECREF(between);
        return say(m, R_whitespace_layout, m->last, pos, detail);
    }
    return say(m, R_stray_text, lo, pos, clip(m->text, lo, hi));
}

static int attr_problems(M *m, const Ev *ev)
{
    for (int k = 0; k < ev->nprob; k++) {
        int p = ev->probs[k];
        if (say(m, PROBLEM_CODE[p], ev->start, ev->end, problem_detail(m->text, ev, p)) < 0) {
            return -1;
        }
    }
    return 0;
}

static int close_invoke(M *m, Py_ssize_t end, int closed);

static int open_block(M *m, const Ev *ev)
{
    int found = TAG_NAMES[(int)ev->name_id].grammar;
    m->foreign = 0;
    if (m->grammar == G_NONE) {
        m->grammar = found;
    } else if (spaced_grammar(found) != spaced_grammar(m->grammar)) {
        /* SGLang's detector for one spelling never sees the other's tags */
        if (say(m, R_dialect_mismatch, ev->start, ev->end,
                PyUnicode_FromFormat("%U block in %U", GRAMMAR_STR[found],
                                     GRAMMAR_STR[m->grammar])) < 0) {
            return -1;
        }
        m->foreign = 1;
    } else if (found != m->grammar) {
        if (say(m, R_version_mismatch, ev->start, ev->end,
                PyUnicode_FromFormat("%U in %U", BLOCK_STR[found], GRAMMAR_STR[m->grammar])) <
            0) {
            return -1;
        }
    }
    m->has_block = 1;
    m->block_grammar = found;
    m->block_spaced = spaced_grammar(found);
    m->block_start = ev->start;
    m->block_invokes = 0;
    m->implicit_block = 0;
    m->state = BLOCK;
    m->last = ev->end;
    return 0;
}

static void implicit_block(M *m, Py_ssize_t pos, int spaced)
{
    m->has_block = 0;
    m->block_spaced = spaced;
    m->foreign = m->grammar != G_NONE && spaced != spaced_grammar(m->grammar);
    m->block_start = pos;
    m->block_invokes = 0;
    m->implicit_block = 1;
    m->state = BLOCK;
}

static int close_block(M *m, const Ev *ev)
{
    int r = 0;
    int closer = TAG_NAMES[(int)ev->name_id].grammar;
    if (m->implicit_block) {
        r = say(m, R_orphan_closer, ev->start, ev->end, name_of(m, ev));
    } else if (m->has_block && closer != m->block_grammar) {
        r = say(m, R_unbalanced, ev->start, ev->end,
                PyUnicode_FromFormat("%U closed as %U", BLOCK_STR[m->block_grammar],
                                     BLOCK_STR[closer]));
    } else if (m->block_invokes == 0) {
        r = say(m, R_empty_block, m->block_start, ev->end, Py_NewRef(S_EMPTY));
    }
    if (r < 0) {
        return -1;
    }
    if (append_span(m->blocks, m->block_start, ev->end) < 0) {
        return -1;
    }
    m->block_spaced = -1;
    m->state = AFTER;
    m->last = ev->end;
    return 0;
}

static int new_invoke(M *m, Py_ssize_t name_a, Py_ssize_t name_b, Py_ssize_t start, int valid)
{
    PyObject *args = PyDict_New();
    if (args == NULL) {
        return -1;
    }
    Py_XSETREF(m->inv_args, args);
    m->has_invoke = 1;
    m->inv_name_a = name_a;
    m->inv_name_b = name_b;
    m->inv_start = start;
    m->inv_valid = valid;
    m->inv_partial = 0;
    return 0;
}

static int new_seen(M *m)
{
    PyObject *seen = PySet_New(NULL);
    if (seen == NULL) {
        return -1;
    }
    Py_XSETREF(m->seen, seen);
    return 0;
}

static int open_invoke(M *m, const Ev *ev)
{
    m->block_invokes++;
    if (new_invoke(m, ev->an_a, ev->an_b, ev->start, 1) < 0) {
        return -1;
    }
    const char *problem = name_problem(m->t, ev->an_a, ev->an_b);
    if (problem && ev->an_a >= 0 &&
        say(m, R_name_invalid, ev->start, ev->end, PyUnicode_FromString(problem)) < 0) {
        return -1;
    }
    if (ev->nprob) {
        m->inv_valid = 0;
    }
    if (ev->self_closing) {
        if (m->grammar == G_V32 && m->block_spaced != 1 &&
            say(m, R_version_mismatch, ev->start, ev->end,
                PyUnicode_FromString("self-closing invoke in v3.2")) < 0) {
            return -1;
        }
        return close_invoke(m, ev->end, 1);
    }
    if (new_seen(m) < 0) {
        return -1;
    }
    m->state = INVOKE;
    return 0;
}

static int implicit_invoke(M *m, Py_ssize_t pos)
{
    if (new_invoke(m, -1, -1, pos, 0) < 0 || new_seen(m) < 0) {
        return -1;
    }
    m->state = INVOKE;
    return 0;
}

static int close_invoke(M *m, Py_ssize_t end, int closed)
{
    int had = m->has_invoke;
    m->has_invoke = 0;
    m->state = BLOCK;
    if (!had) {
        return 0;
    }
    if (!closed) {
        m->inv_valid = 0;
        return 0;
    }
    if (m->inv_partial || m->inv_name_a < 0 || m->inv_name_b <= m->inv_name_a) {
        return 0;
    }
    /* structure.Machine._check_call: the name, then the tools (in Python: structure.check_call) */
    if (name_problem(m->t, m->inv_name_a, m->inv_name_b) != NULL) {
        m->inv_valid = 0;
        return 0;
    }
    PyObject *name = PyUnicode_Substring(m->text, m->inv_name_a, m->inv_name_b);
    if (name == NULL) {
        return -1;
    }
    if (m->tools != Py_None) {
        PyObject *s = PyLong_FromSsize_t(m->inv_start), *e = PyLong_FromSsize_t(end);
        PyObject *r = NULL;
        if (s != NULL && e != NULL) {
            PyObject *args[7] = {m->tools, m->report, name, m->inv_args,
                                 m->inv_valid ? Py_True : Py_False, s, e};
            r = PyObject_Vectorcall(m->check_call, args, 7, NULL);
        }
        Py_XDECREF(s);
        Py_XDECREF(e);
        int ok = r != NULL ? PyObject_IsTrue(r) : -1;
        Py_XDECREF(r);
        if (ok < 0) {
            Py_DECREF(name);
            return -1;
        }
        m->inv_valid = ok;
    }
    if (m->inv_valid && !m->implicit_block && !m->foreign) {
        PyObject *s = PyLong_FromSsize_t(m->inv_start), *e = PyLong_FromSsize_t(end);
        PyObject *call = NULL;
        if (s != NULL && e != NULL) {
            PyObject *args[4] = {name, m->inv_args, s, e};
            call = PyObject_Vectorcall(m->tool_call, args, 4, NULL);
        }
        Py_XDECREF(s);
        Py_XDECREF(e);
        if (call == NULL || PyList_Append(m->calls, call) < 0) {
            Py_XDECREF(call);
            Py_DECREF(name);
            return -1;
        }
        Py_DECREF(call);
    }
    Py_DECREF(name);
    return 0;
}

static int open_param(M *m, const Ev *ev)
{
    int keep = 1;
    if (m->seen == NULL && new_seen(m) < 0) {
        return -1;
    }
    const char *problem = name_problem(m->t, ev->an_a, ev->an_b);
    PyObject *name = NULL;
    if (ev->an_a >= 0) {
        name = PyUnicode_Substring(m->text, ev->an_a, ev->an_b);
        if (name == NULL) {
            return -1;
        }
    }
    if (problem && name != NULL &&
        say(m, R_name_invalid, ev->start, ev->end, PyUnicode_FromString(problem)) < 0) {
        goto error;
    }
    if (problem || ev->nprob) {
        keep = 0;
    } else {
        int seen = PySet_Contains(m->seen, name);
        if (seen < 0) {
            goto error;
        }
        if (seen) {
            if (say(m, R_param_duplicate, ev->start, ev->end, Py_NewRef(name)) < 0) {
                goto error;
            }
            keep = 0;
        }
    }
    if (name != NULL && PySet_Add(m->seen, name) < 0) {
        goto error;
    }
    Py_XDECREF(name);
    m->has_param = 1;
    m->p_name_a = ev->an_a;
    m->p_name_b = ev->an_b;
    m->p_false = ev->fl_a >= 0 && slice_is(m->t, ev->fl_a, ev->fl_b, "false");
    m->p_value_start = ev->end;
    m->p_tag_start = ev->start;
    m->p_keep = keep;
    m->state = VALUE;
    return 0;
error:
    Py_XDECREF(name);
    return -1;
}

static int close_param(M *m, Py_ssize_t value_end, Py_ssize_t tag_end)
{
    int had = m->has_param;
    m->has_param = 0;
    m->state = INVOKE;
    m->last = tag_end;
    if (!had) {
        return 0;
    }
    if (append_span(m->values, m->p_value_start, value_end) < 0) {
        return -1;
    }
    if (!m->has_invoke) {
        return 0;
    }
    if (m->has_gap && m->p_value_start <= m->gap && m->gap <= value_end) {
        m->inv_partial = 1; /* the middle of this value was dropped: nothing to check */
        return 0;
    }
    PyObject *value = PyUnicode_Substring(m->text, m->p_value_start,
                                          value_end < m->p_value_start ? m->p_value_start
                                                                       : value_end);
    if (value == NULL) {
        return -1;
    }
    if (m->p_false) {
        PyObject *r = PyObject_CallOneArg(m->strict_json, value);
        if (r == NULL || !PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
            if (r != NULL) {
                PyErr_SetString(PyExc_TypeError, "strict_json returns (ok, value)");
            }
            Py_XDECREF(r);
            Py_DECREF(value);
            return -1;
        }
        int ok = PyObject_IsTrue(PyTuple_GET_ITEM(r, 0));
        if (ok <= 0) {
            Py_DECREF(r);
            if (ok < 0) {
                Py_DECREF(value);
                return -1;
            }
            int s = say(m, R_json_invalid, m->p_value_start, value_end,
                        clip(value, 0, PyUnicode_GET_LENGTH(value)));
            Py_DECREF(value);
            m->inv_valid = 0;
            return s;
        }
        Py_SETREF(value, Py_NewRef(PyTuple_GET_ITEM(r, 1)));
        Py_DECREF(r);
    }
    int r = 0;
    if (m->p_keep) {
        PyObject *key = m->p_name_a >= 0
                            ? PyUnicode_Substring(m->text, m->p_name_a, m->p_name_b)
                            : Py_NewRef(S_EMPTY);
        r = key == NULL ? -1 : PyDict_SetItem(m->inv_args, key, value);
        Py_XDECREF(key);
    } else {
        m->inv_valid = 0;
    }
    Py_DECREF(value);
    return r;
}

static int in_invoke(M *m, const Ev *ev);

static int in_out(M *m, const Ev *ev)
{
    if (ev->closing) {
        return say(m, R_orphan_closer, ev->start, ev->end, name_of(m, ev));
    }
    if (ev->kind == K_BLOCK) {
        return open_block(m, ev);
    }
    if (ev->kind == K_INVOKE) {
        if (say(m, R_bare_invoke, ev->start, ev->end,
                PyUnicode_FromString("invoke outside a block")) < 0) {
            return -1;
        }
        implicit_block(m, ev->start, ev->spaced);
        return open_invoke(m, ev);
    }
    if (say(m, R_bare_invoke, ev->start, ev->end,
            PyUnicode_FromString("parameter outside an invoke")) < 0) {
        return -1;
    }
    implicit_block(m, ev->start, ev->spaced);
    if (implicit_invoke(m, ev->start) < 0) {
        return -1;
    }
    return open_param(m, ev);
}

static int in_block(M *m, const Ev *ev)
{
    if (ev->closing) {
        if (ev->kind == K_BLOCK) {
            return close_block(m, ev);
        }
        return say(m, R_orphan_closer, ev->start, ev->end, name_of(m, ev));
    }
    if (ev->kind == K_BLOCK) {
        return say(m, R_nested_tag, ev->start, ev->end,
                   PyUnicode_FromString("block inside a block"));
    }
    if (ev->kind == K_INVOKE) {
        return open_invoke(m, ev);
    }
    if (say(m, R_bare_invoke, ev->start, ev->end,
            PyUnicode_FromString("parameter outside an invoke")) < 0 ||
        implicit_invoke(m, ev->start) < 0) {
        return -1;
    }
    return open_param(m, ev);
}

static int in_invoke(M *m, const Ev *ev)
{
    if (ev->closing) {
        if (ev->kind == K_INVOKE) {
            return close_invoke(m, ev->end, 1);
        }
        if (ev->kind == K_BLOCK) {
            if (say(m, R_unbalanced, ev->start, ev->end,
                    PyUnicode_FromString("block closed with an invoke open")) < 0 ||
                close_invoke(m, ev->start, 0) < 0) {
                return -1;
            }
            return close_block(m, ev);
        }
        return say(m, R_orphan_closer, ev->start, ev->end, name_of(m, ev));
    }
    if (ev->kind == K_PARAMETER) {
        return open_param(m, ev);
    }
    if (ev->kind == K_INVOKE) {
        if (say(m, R_nested_tag, ev->start, ev->end,
                PyUnicode_FromString("invoke inside an invoke")) < 0 ||
            close_invoke(m, ev->start, 0) < 0) {
            return -1;
        }
        return open_invoke(m, ev);
    }
    return say(m, R_nested_tag, ev->start, ev->end,
               PyUnicode_FromString("block inside an invoke"));
}

static int tag_in_value(M *m, const Ev *ev)
{
    if (ev->closing && ev->kind == K_PARAMETER) {
        if (attr_problems(m, ev) < 0) {
            return -1;
        }
        return close_param(m, ev->start, ev->end);
    }
    if (ev->closing && (ev->kind == K_INVOKE || ev->kind == K_BLOCK)) {
        PyObject *name = name_of(m, ev);
        if (say(m, R_unbalanced, ev->start, ev->end,
                name ? PyUnicode_FromFormat("%U closed inside a value", name) : NULL) < 0) {
            Py_XDECREF(name);
            return -1;
        }
        Py_DECREF(name);
        if (close_param(m, ev->start, ev->start) < 0) {
            return -1;
        }
        if (m->has_invoke) {
            m->inv_valid = 0;
        }
        m->last = ev->end;
        return in_invoke(m, ev);
    }
    if (ev->kind == K_UNKNOWN) {
        return say(m, R_tag_unknown, ev->start, ev->end, name_or_none(m, ev));
    }
    PyObject *name = name_of(m, ev);
    int r = say(m, R_nested_tag, ev->start, ev->end,
                name ? PyUnicode_FromFormat("%U inside a value", name) : NULL);
    Py_XDECREF(name);
    return r;
}

static int expected_spacing(M *m, const Ev *ev)
{
    if (ev->kind == K_BLOCK) {
        return spaced_grammar(TAG_NAMES[(int)ev->name_id].grammar);
    }
    if ((m->state == BLOCK || m->state == INVOKE || m->state == VALUE) && m->block_spaced >= 0) {
        return m->block_spaced;
    }
    if (m->grammar != G_NONE) {
        return spaced_grammar(m->grammar);
    }
    return ev->spaced;
}

static int on_tag(M *m, const Ev *ev)
{
    int q = quoted(m, ev->start);
    if (q) {
        return q < 0 ? -1 : 0;
    }
    m->dsml_seen = 1;
    if (m->state == AFTER) {
        if (ev->kind == K_BLOCK && !ev->closing && ev->complete) {
            if (say(m, R_multiple_blocks, ev->start, ev->end, Py_NewRef(S_EMPTY)) < 0) {
                return -1;
            }
            return open_block(m, ev);
        }
        return after_text(m, ev->start, ev->end);
    }
    if (!ev->complete) {
        m->open_at_end = 1;
        m->open_block_start = m->state != OUT ? m->block_start : ev->start;
        if (!m->length) {
            return say(m, R_unbalanced, ev->start, ev->end,
                       PyUnicode_FromString("text ends inside a tag"));
        }
        return 0;
    }
    PyObject *reason = VARIANT_REASON[ev->variant];
    if (reason != NULL) {
        if (say(m, reason, ev->start, ev->end, Py_NewRef(S_EMPTY)) < 0) {
            return -1;
        }
    } else if (ev->spaced != expected_spacing(m, ev)) {
        if (say(m, R_marker_spaced, ev->start, ev->end,
                PyUnicode_FromString(ev->spaced ? "space after the marker"
                                                : "V4.1 tag without its space")) < 0) {
            return -1;
        }
    }
    if (m->state == VALUE) {
        return tag_in_value(m, ev);
    }
    if (ev->kind == K_UNKNOWN) {
        if (say(m, R_tag_unknown, ev->start, ev->end, name_or_none(m, ev)) < 0) {
            return -1;
        }
        if (m->state == BLOCK || m->state == INVOKE) {
            if (gap(m, ev->start) < 0) {
                return -1;
            }
            m->last = ev->end;
        }
        return 0;
    }
    if (attr_problems(m, ev) < 0) {
        return -1;
    }
    if ((m->state == BLOCK || m->state == INVOKE) && gap(m, ev->start) < 0) {
        return -1;
    }
    m->last = ev->end;
    switch (m->state) {
    case OUT:
        return in_out(m, ev);
    case BLOCK:
        return in_block(m, ev);
    default:
        return in_invoke(m, ev);
    }
}

static int on_event(M *m, const Ev *ev)
{
    int q;
    switch (ev->type) {
    case EV_TAG:
        return on_tag(m, ev);
    case EV_SPECIAL:
        if (m->state == AFTER && after_text(m, ev->start, ev->end) < 0) {
            return -1;
        }
        q = quoted(m, ev->start);
        if (q) {
            return q < 0 ? -1 : 0;
        }
        return say(m, R_special_token_leak, ev->start, ev->end, name_of(m, ev));
    case EV_THINK:
        if (m->state == VALUE) {
            return 0; /* code in a value may well contain the literal tag */
        }
        q = quoted(m, ev->start);
        if (q) {
            return q < 0 ? -1 : 0;
        }
        return say(m, R_think_tag_leak, ev->start, ev->end,
                   Py_NewRef(ev->closing ? S_THINK_CLOSE : S_THINK_OPEN));
    default:
        if (m->state == VALUE) {
            return 0;
        }
        q = quoted(m, ev->start);
        if (q) {
            return q < 0 ? -1 : 0;
        }
        if (m->state == AFTER) {
            return after_text(m, ev->start, ev->end);
        }
        return say(m, R_marker_missing, ev->start, ev->end,
                   PyUnicode_Substring(m->text, ev->start, ev->end));
    }
}

static int finish(M *m, Py_ssize_t body_end)
{
    if (m->capped) {
        return 0;
    }
    if (m->state == AFTER) {
        Py_ssize_t lo, hi;
        strip_bounds(m->t, m->last, body_end, &lo, &hi);
        if (lo != hi) {
            return after_text(m, lo, body_end);
        }
        return 0;
    }
    if (m->state == OUT) {
        return 0;
    }
    m->open_at_end = 1;
    m->open_block_start = m->block_start;
    if (m->length) {
        return 0;
    }
    if (m->state == VALUE && m->has_param) {
        return say(m, R_unbalanced, m->p_tag_start, body_end,
                   PyUnicode_FromString("parameter never closed"));
    }
    if (m->state == INVOKE && m->has_invoke) {
        return say(m, R_unbalanced, m->inv_start, body_end,
                   PyUnicode_FromString("invoke never closed"));
    }
    if (!m->implicit_block) {
        return say(m, R_unbalanced, m->block_start, body_end,
                   PyUnicode_FromString("block never closed"));
    }
    return 0;
}

/* ---- module functions ------------------------------------------------------------------------ */

static int grammar_index(PyObject *g)
{
    if (g == Py_None) {
        return G_NONE;
    }
    for (int k = 0; k < 3; k++) {
        if (PyUnicode_Check(g) && PyUnicode_Compare(g, GRAMMAR_STR[k]) == 0) {
            return k;
        }
    }
    PyErr_Format(PyExc_ValueError, "unknown grammar %R", g);
    return -2;
}

PyDoc_STRVAR(parse_doc,
"parse(text, body_end, limit, grammar, length, gap, report, covers, check_call, tools,\n"
"      strict_json, tool_call) -> (calls, blocks, values, grammar, open_at_end,\n"
"      open_block_start, dsml_seen, n_events, last_event_end)\n\n"
"structure.parse_channel_python in C: tokenize (at most limit events) and run the machine up\n"
"to body_end. report(reason, start, end, detail, inside) receives every reason; covers(pos)\n"
"is Quoting.covers; check_call(tools, report, name, args, valid, start, end) -> valid checks\n"
"a closed invoke (not called when tools is None); strict_json and tool_call are structure's.");

static PyObject *parse(PyObject *Py_UNUSED(self), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 12 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "parse() takes 12 arguments, text first");
        return NULL;
    }
    PyObject *text = args[0];
    Py_ssize_t body_end = PyLong_AsSsize_t(args[1]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if ((body_end == -1 || limit == -1) && PyErr_Occurred()) {
        return NULL;
    }
    int g = grammar_index(args[3]);
    int length = PyObject_IsTrue(args[4]);
    if (g == -2 || length < 0) {
        return NULL;
    }
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    M m;
    memset(&m, 0, sizeof m);
    m.t = &t;
    m.text = text;
    m.grammar = g;
    m.length = length;
    if (args[5] != Py_None) {
        m.has_gap = 1;
        m.gap = PyLong_AsSsize_t(args[5]);
        if (m.gap == -1 && PyErr_Occurred()) {
            return NULL;
        }
    }
    m.report = args[6];
    m.covers = args[7];
    m.check_call = args[8];
    m.tools = args[9];
    m.strict_json = args[10];
    m.tool_call = args[11];
    m.block_spaced = -1;
    m.floor = -1;
    Events es = {NULL, 0, 0};
    PyObject *result = NULL;
    m.calls = PyList_New(0);
    m.blocks = PyList_New(0);
    m.values = PyList_New(0);
    if (m.calls == NULL || m.blocks == NULL || m.values == NULL || limit < 1 ||
        scan_events(&t, limit, &es) < 0) {
        if (limit < 1 && !PyErr_Occurred()) {
            PyErr_SetString(PyExc_ValueError, "limit must be positive");
        }
        goto done;
    }
    m.capped = es.n >= limit;
    for (Py_ssize_t k = 0; k < es.n; k++) {
        if (es.v[k].start >= body_end) {
            break;
        }
        if (on_event(&m, &es.v[k]) < 0) {
            goto done;
        }
    }
    if (finish(&m, body_end) < 0) {
        goto done;
    }
    result = Py_BuildValue("(OOOOOnOnn)", m.calls, m.blocks, m.values,
                           m.grammar == G_NONE ? Py_None : GRAMMAR_STR[m.grammar],
                           m.open_at_end ? Py_True : Py_False, m.open_block_start,
                           m.dsml_seen ? Py_True : Py_False, es.n,
                           es.n ? es.v[es.n - 1].end : (Py_ssize_t)0);
done:
    PyMem_Free(es.v);
    Py_XDECREF(m.calls);
    Py_XDECREF(m.blocks);
    Py_XDECREF(m.values);
    Py_XDECREF(m.inv_args);
    Py_XDECREF(m.seen);
    return result;
}

PyDoc_STRVAR(events_doc,
"events(text, limit) -> list of tuples\n\n"
"tokens.scan in C, each event as its dataclass's fields after its kind: ('tag', start, end,\n"
"closing, name, variant, complete, self_closing, attr_name, string_flag, problems, kind,\n"
"spaced), ('special', start, end, name, ascii), ('think', start, end, closing) or\n"
"('bare', start, end, text). For the equivalence tests; the grader calls parse().");

static PyObject *events(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *text;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "Un:events", &text, &limit)) {
        return NULL;
    }
    if (limit < 1) {
        PyErr_SetString(PyExc_ValueError, "limit must be positive");
        return NULL;
    }
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    Events es = {NULL, 0, 0};
    PyObject *out = NULL;
    if (scan_events(&t, limit, &es) == 0) {
        out = PyList_New(es.n);
        for (Py_ssize_t k = 0; out != NULL && k < es.n; k++) {
            PyObject *item = event_tuple(text, &es.v[k]);
            if (item == NULL) {
                Py_CLEAR(out);
                break;
            }
            PyList_SET_ITEM(out, k, item);
        }
    }
    PyMem_Free(es.v);
    return out;
}

static PyMethodDef methods[] = {
    {"parse", (PyCFunction)(void (*)(void))parse, METH_FASTCALL, parse_doc},
    {"events", events, METH_VARARGS, events_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "exporter.dsml._grammar",
    "The DSML grammar pass in C (see structure.parse_channel_python, its specification).", -1,
    methods,
};

static PyObject *intern(const char *s)
{
    PyObject *o = PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), NULL);
    if (o != NULL) {
        PyUnicode_InternInPlace(&o);
    }
    return o;
}

static int make_constants(void)
{
#define MAKE(name)                                                                                \
    if ((R_##name = intern(#name)) == NULL)                                                       \
        return -1;
    REASONS(MAKE)
#undef MAKE
    if ((S_EMPTY = intern("")) == NULL || (S_NO_NAME = intern("(no name)")) == NULL ||
        (S_THINK_OPEN = intern("<think>")) == NULL ||
        (S_THINK_CLOSE = intern("</think>")) == NULL) {
        return -1;
    }
    for (int k = 0; k < N_ASCII_SPECIAL; k++) {
        if ((ASCII_SPECIAL_STR[k] = intern(ASCII_SPECIAL[k])) == NULL) {
            return -1;
        }
    }
    for (int k = 0; k < 3; k++) {
        if ((GRAMMAR_STR[k] = intern(GRAMMAR_NAMES[k])) == NULL ||
            (BLOCK_STR[k] = intern(BLOCK_OF[k])) == NULL) {
            return -1;
        }
    }
    static const char *variants[] = {"canonical", "ascii", "doubled", "spaced", "damaged"};
    static const char *reasons[] = {NULL, "marker_ascii_pipe", "marker_doubled_bar",
                                    "marker_spaced", "marker_damaged"};
    static const char *kinds[] = {"block", "invoke", "parameter", "unknown"};
    for (int k = 0; k < 5; k++) {
        if ((VARIANT_STR[k] = intern(variants[k])) == NULL ||
            (reasons[k] && (VARIANT_REASON[k] = intern(reasons[k])) == NULL)) {
            return -1;
        }
    }
    for (int k = 0; k < 4; k++) {
        if ((KIND_STR[k] = intern(kinds[k])) == NULL) {
            return -1;
        }
    }
    static const char *codes[] = {"attr_malformed",      "name_invalid",   "string_flag_missing",
                                  "string_flag_invalid", "attr_malformed", "attr_malformed",
                                  "attr_malformed"};
    static const char *details[] = {"this tag takes no attributes",
                                    "no name attribute",
                                    "parameter without string=",
                                    "",
                                    "self-closing parameter",
                                    "attributes not in canonical form",
                                    "tag not closed by `>` on its line"};
    for (int k = 0; k < 7; k++) {
        if ((PROBLEM_CODE[k] = intern(codes[k])) == NULL ||
            (PROBLEM_DETAIL[k] = intern(details[k])) == NULL) {
            return -1;
        }
    }
    return 0;
}

PyMODINIT_FUNC PyInit__grammar(void)
{
    if (make_constants() < 0) {
        return NULL;
    }
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) {
        return NULL;
    }
    /* the names compiled in, for the test that compares them with markers.py */
    PyObject *names = PyDict_New();
    PyObject *special = PyTuple_New(N_ASCII_SPECIAL);
    if (names == NULL || special == NULL) {
        goto fail;
    }
    for (int k = 0; k < 3; k++) {
        if (PyDict_SetItem(names, BLOCK_STR[k], GRAMMAR_STR[k]) < 0) {
            goto fail;
        }
    }
    for (int k = 0; k < N_ASCII_SPECIAL; k++) {
        PyTuple_SET_ITEM(special, k, Py_NewRef(ASCII_SPECIAL_STR[k]));
    }
    if (PyModule_AddObjectRef(mod, "GRAMMAR_OF_BLOCK", names) < 0 ||
        PyModule_AddObjectRef(mod, "ASCII_SPECIAL_NAMES", special) < 0 ||
        PyModule_AddIntConstant(mod, "MAX_TAG_CHARS", MAX_TAG_CHARS) < 0) {
        goto fail;
    }
    Py_DECREF(names);
    Py_DECREF(special);
    return mod;
fail:
    Py_XDECREF(names);
    Py_XDECREF(special);
    Py_DECREF(mod);
    return NULL;
}
