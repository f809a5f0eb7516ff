/*
 * exporter.dsml._textscan: the DSML grader's hot character-level passes in C.
 *
 * Why it exists: in Python these passes are chains of C primitives (str.find, startswith,
 * bytes.translate, regex calls) whose per-call cost, not the bytes read, set the grader's
 * throughput; here each is one pass over the str's own buffer. They are:
 *
 *   scan()            the detection core of textcheck.py (loops, script mix, mojibake,
 *                     control characters, U+FFFD, the symbol-salad screen);
 *   canonical_calls() the structural pass over a canonical block (fastpath.py);
 *   may_glue(), prose_screens(), value_flags()
 *                     the screens of three once-per-sample checks (phenotypes.py): each says
 *                     whether the check's exact pass, in Python, can find anything
 *                     (value_flags: for every value of a block in one call);
 *   soup_screen()     the first value of a block that can hold word-piece soup (soup.py).
 *
 * Contract: each returns exactly what its pure-Python reference returns
 * (textcheck.check_text_python, fastpath.canonical_calls_python, and the phenotypes.py twins
 * named at each screen), position for position;
 * tests/dsml/test_textscan.py holds them equal on the corpora, at every threshold and edge, on
 * damaged blocks and under hypothesis. It is the CPython json/_json pattern: the Python code is
 * the specification and the fallback, this module only makes it fast. Every threshold comes
 * from exporter/dsml/thresholds.py through configure(); none is written here.
 *
 * Safety: every read is bounds-checked against the str's length; buffers that grow with the
 * input are heap-allocated and freed on every path; each pass is linear in the text (the loop
 * finder does the same bounded work per anchor as the Python version). Text never leaves this
 * module except as offsets and the substrings the Python reference would return.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ---- thresholds (configure) ------------------------------------------------------------- */

typedef struct {
    Py_ssize_t probe, stride, max_period, far_every, tries;
    Py_ssize_t min_letters, repeats_short, repeats_medium, repeats_long, repeats_few;
    Py_ssize_t short_unit, long_unit, min_loop_chars;
    Py_ssize_t script_min_groups, script_min_switches, script_span, script_max_switches;
    Py_ssize_t salad_min_run;
} Limits;

#define MAX_LETTERS 16   /* distinct letters counted per loop unit (min_letters <= this) */
#define MAX_SWITCHES 64  /* script switches kept in the window (script_min_switches <= this) */
#define MAX_HITS 8       /* positions reported per character-level check, as in Python */
#define MAX_LOOPS 64

static Limits L;
static int configured = 0;

/* ---- text access -------------------------------------------------------------------------- */

typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
} Text;

#define CH(t, i) PyUnicode_READ((t)->kind, (t)->data, (i))

/* text[a:a+len] == text[b:b+len]; both ranges are in bounds */
static inline int same(const Text *t, Py_ssize_t a, Py_ssize_t b, Py_ssize_t len)
{
    if (a == b) {
        return 1;
    }
    const char *base = (const char *)t->data;
    return memcmp(base + a * t->kind, base + b * t->kind, (size_t)(len * t->kind)) == 0;
}

/* text.startswith(text[a:a+plen], pos), with Python's index rules (a negative pos counts from
 * the end; a prefix that does not fit is False) */
static int starts_at(const Text *t, Py_ssize_t a, Py_ssize_t plen, Py_ssize_t pos)
{
    Py_ssize_t n = t->n;
    if (pos < 0) {
        pos += n;
        if (pos < 0) {
            pos = 0;
        }
    }
    if (pos > n || n - pos < plen) {
        return 0;
    }
    return same(t, a, pos, plen);
}

/* text.find(text[a:a+plen], start, end): lowest index in [start, end - plen], or -1.
 *
 * The loop finder calls this some 30 times per 4 KiB with windows of 270-1040 characters, so
 * it decides the finder's cost: candidates for one character of the probe are found a word
 * at a time (memchr for 1-byte text; for 2- and 4-byte text a SWAR test for a lane equal to
 * it, which may flag extra lanes but never misses one: each flagged lane is checked exactly);
 * a candidate whose last character differs is dropped before the full comparison. The
 * character looked for is not always the first: a probe often starts with a space or a common
 * letter, which would make nearly every word a candidate (anchor_of). */
#define SWAR_FIND(TYPE, LANES, ONES, HIGHS)                                       \
    do {                                                                          \
        const TYPE *s = (const TYPE *)t->data;                                    \
        const TYPE cd = s[a + d], cn = s[a + plen - 1];                           \
        const uint64_t pat = (uint64_t)(ONES) * (uint64_t)cd;                     \
        Py_ssize_t k = start;                                                     \
        for (; k + (LANES) - 1 <= last; k += (LANES)) {                           \
            uint64_t v;                                                           \
            memcpy(&v, s + k + d, sizeof v);                                      \
            uint64_t x = v ^ pat;                                                 \
            if (((x - (ONES)) & ~x & (HIGHS)) == 0) {                             \
                continue;                                                         \
            }                                                                     \
            for (Py_ssize_t l = k; l < k + (LANES); l++) {                        \
                if (s[l + d] == cd && s[l + plen - 1] == cn && same(t, a, l, plen)) { \
                    return l;                                                     \
                }                                                                 \
            }                                                                     \
        }                                                                         \
        for (; k <= last; k++) {                                                  \
            if (s[k + d] == cd && s[k + plen - 1] == cn && same(t, a, k, plen)) { \
                return k;                                                         \
            }                                                                     \
        }                                                                         \
    } while (0)

/* The offset in text[a:a+plen] of the character to look for first: the first that is neither
 * whitespace nor one of English's commonest letters, else the first that is not whitespace
 * (a probe that starts at a space would stop the search at every word otherwise). */
static Py_ssize_t anchor_of(const Text *t, Py_ssize_t a, Py_ssize_t plen)
{
    Py_ssize_t fallback = -1;
    for (Py_ssize_t k = 0; k < plen; k++) {
        Py_UCS4 c = CH(t, a + k);
        if (Py_UNICODE_ISSPACE(c)) {
            continue;
        }
        if (c >= 0x80 || strchr("etaoinsrhl", (int)(c | 0x20)) == NULL) {
            return k;
        }
        if (fallback < 0) {
            fallback = k;
        }
    }
    return fallback < 0 ? 0 : fallback;
}

static Py_ssize_t find_in(const Text *t, Py_ssize_t a, Py_ssize_t plen, Py_ssize_t start,
                          Py_ssize_t end)
{
    if (end > t->n) {
        end = t->n;
    }
    const Py_ssize_t last = end - plen;
    if (last < start) {
        return -1;
    }
    const Py_ssize_t d = anchor_of(t, a, plen); /* candidates: text[l + d] == text[a + d] */
    switch (t->kind) {
    case PyUnicode_1BYTE_KIND: {
        const Py_UCS1 *s = (const Py_UCS1 *)t->data;
        Py_ssize_t k = start;
        while (k <= last) {
            const Py_UCS1 *hit = memchr(s + k + d, s[a + d], (size_t)(last - k + 1));
            if (hit == NULL) {
                return -1;
            }
            k = hit - s - d;
            if (s[k + plen - 1] == s[a + plen - 1] && same(t, a, k, plen)) {
                return k;
            }
            k++;
        }
        return -1;
    }
    case PyUnicode_2BYTE_KIND:
        SWAR_FIND(Py_UCS2, 4, 0x0001000100010001ULL, 0x8000800080008000ULL);
        return -1;
    default:
        SWAR_FIND(Py_UCS4, 2, 0x0000000100000001ULL, 0x8000000080000000ULL);
        return -1;
    }
}

/* ---- ngram loops (loops.py: find_loops, min_repeats, _forward, _backward) --------------- */

/* repeats a unit of text[i:i+period] needs, or -1 when it never counts (no letter) */
static Py_ssize_t min_repeats(const Text *t, Py_ssize_t i, Py_ssize_t period)
{
    Py_UCS4 seen[MAX_LETTERS];
    Py_ssize_t letters = 0;
    for (Py_ssize_t k = i; k < i + period && letters < L.min_letters; k++) {
        Py_UCS4 c = CH(t, k);
        if (!Py_UNICODE_ISALPHA(c)) {
            continue;
        }
        Py_ssize_t s = 0;
        while (s < letters && seen[s] != c) {
            s++;
        }
        if (s == letters) {
            seen[letters++] = c;
        }
    }
    if (letters == 0) {
        return -1;
    }
    if (letters < L.min_letters) {
        return L.repeats_few;
    }
    if (period < L.short_unit) {
        return L.repeats_short;
    }
    if (period < L.long_unit) {
        return L.repeats_medium;
    }
    return L.repeats_long;
}

/* the run of text[i:i+period] from i: (end, repeats), as loops._forward returns them */
static void run_forward(const Text *t, Py_ssize_t i, Py_ssize_t period, Py_ssize_t need,
                        Py_ssize_t *end, Py_ssize_t *repeats)
{
    Py_ssize_t n = t->n;
    Py_ssize_t pos = i + period; /* the unit matches itself */
    Py_ssize_t m = 1;
    while (n - pos >= period && same(t, i, pos, period)) {
        pos += period;
        m++;
    }
    *repeats = m;
    if (m == 1) {
        *end = i + period;
        return;
    }
    if (m < need) {
        *end = pos;
        return;
    }
    Py_ssize_t k = 0;
    while (pos + k < n && k < period && CH(t, pos + k) == CH(t, i + k)) {
        k++;
    }
    *end = pos + k;
}

/* where the loop really starts (loops._backward): (start, units found before i) */
static void run_backward(const Text *t, Py_ssize_t i, Py_ssize_t period, Py_ssize_t *start,
                         Py_ssize_t *back)
{
    Py_ssize_t floor = i - 2 * L.stride - period;
    if (floor < 0) {
        floor = 0;
    }
    Py_ssize_t s = i, b = 0;
    while (s - period >= floor && same(t, i, s - period, period)) {
        s -= period;
        b++;
    }
    *start = s;
    *back = b;
}

typedef struct {
    Py_ssize_t start, end, period, repeats;
} Loop;

static Py_ssize_t find_loops(const Text *t, Py_ssize_t limit, Loop *out)
{
    Py_ssize_t n = t->n, found = 0;
    if (n < L.min_loop_chars || limit <= 0) {
        return 0;
    }
    const Py_ssize_t probe = L.probe;
    const Py_ssize_t near = L.long_unit + probe, far = L.max_period + probe;
    const Py_ssize_t last = n - probe;
    Py_ssize_t i = 0, k = 0;
    while (i <= last) {
        Py_ssize_t hi = i + (k % L.far_every == 0 ? far : near);
        k++;
        Py_ssize_t j = find_in(t, i, probe, i + 1, hi);
        if (j < 0) {
            i += L.stride;
            continue;
        }
        Py_ssize_t next_i = i + L.stride;
        Py_ssize_t tries = 0;
        while (j >= 0) {
            Py_ssize_t period = j - i;
            if (starts_at(t, i, probe, j + period) &&
                (starts_at(t, i, probe, j + 2 * period) || starts_at(t, i, probe, i - period))) {
                Py_ssize_t need = min_repeats(t, i, period);
                if (need < 0) {
                    Py_ssize_t end, reps;
                    run_forward(t, i, period, PY_SSIZE_T_MAX, &end, &reps);
                    if (end > next_i) {
                        next_i = end;
                    }
                    break;
                }
                Py_ssize_t start, back, end, reps;
                run_backward(t, i, period, &start, &back);
                run_forward(t, i, period, need - back, &end, &reps);
                if (reps + back >= need) {
                    out[found].start = start;
                    out[found].end = end;
                    out[found].period = period;
                    out[found].repeats = reps + back;
                    found++;
                    next_i = end;
                    break;
                }
            }
            tries++;
            if (tries >= L.tries) {
                break;
            }
            j = find_in(t, i, probe, j + 1, hi);
        }
        if (found >= limit) {
            break;
        }
        i = next_i;
    }
    return found;
}

/* ---- per-character tables ------------------------------------------------------------------ */

/* One lookup per character answers every question the passes ask of it (as screen.py's one
 * bytes.translate does in Python). Characters above U+FFFF are none of these things: their
 * UTF-8 lead byte (F0-F4) is neither a script group, punctuation, a control nor a mojibake
 * lead. Built once, at import. */
enum {
    F_CTRL = 1,    /* textcheck._CTRL's class: C0 (not tab/newline/CR/FF/ESC), DEL, C1 */
    F_ESC = 2,     /* ESC: a control unless ESC-[ (ANSI colour) */
    F_FFFD = 4,    /* U+FFFD */
    F_MOJI = 8,    /* may start (or, for Ġ Ċ ĉ, end) a textcheck._MOJIBAKE match */
    F_PUNCT = 16,  /* screen.PUNCT: the salad screen's punctuation/symbol class */
    F_SPACE = 32,  /* deleted by screen.classify (space, tab, newline, CR, FF) */
};
#define F_RARE (F_CTRL | F_ESC | F_FFFD | F_MOJI)

static unsigned char FLAGS[0x10000];
static char GROUP[0x10000]; /* skeleton byte: a group letter (LGCAHRIJK), ' ' or '.' */

/* The skeleton byte of one BMP character, from its UTF-8 lead byte as screen.SCRIPT_TABLE
 * decides (U+3000-U+303F, CJK punctuation, counts as punctuation: screen.classify). */
static char group_of(Py_UCS4 c)
{
    unsigned lead;
    if (c < 0x80) {
        if (c == ' ') {
            return ' ';
        }
        return ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ? 'L' : '.';
    }
    if (c < 0x800) {
        lead = 0xC0 | (unsigned)(c >> 6);
    } else {
        if (c >= 0x3000 && c <= 0x303F) {
            return '.';
        }
        lead = 0xE0 | (unsigned)(c >> 12);
    }
    if (lead >= 0xC3 && lead <= 0xC9) return 'L';
    if (lead == 0xCE || lead == 0xCF) return 'G';
    if (lead >= 0xD0 && lead <= 0xD4) return 'C';
    if (lead == 0xD5) return 'A';
    if (lead == 0xD6 || lead == 0xD7) return 'H';
    if ((lead >= 0xD8 && lead <= 0xDB) || lead == 0xDD) return 'R';
    if (lead == 0xE0) return 'I';
    if (lead == 0xE1) return 'L';
    if (lead >= 0xE3 && lead <= 0xE9) return 'J';
    if (lead >= 0xEA && lead <= 0xED) return 'K';
    return '.';
}

/* screen.classify's PUNCT class for one BMP character that is not deleted whitespace */
static int is_punct(Py_UCS4 c)
{
    if (c < 0x80) {
        if (c < 0x20 || c == 0x7F) {
            return 0; /* control or ESC */
        }
        return !(((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9') || c == '_');
    }
    if (c < 0x800) {
        return (0xC0 | (c >> 6)) == 0xC2;
    }
    unsigned lead = 0xE0 | (unsigned)(c >> 12);
    return lead == 0xE2 || lead == 0xEE || lead == 0xEF || (c >= 0x3000 && c <= 0x303F);
}

static inline int is_glue(Py_UCS4 c) { return c == 0x120 || c == 0x10A || c == 0x109; }

static void build_tables(void)
{
    for (Py_UCS4 c = 0; c < 0x10000; c++) {
        unsigned f = 0;
        if (c <= 0x08 || c == 0x0B || (c >= 0x0E && c <= 0x1A) || (c >= 0x1C && c <= 0x1F) ||
            (c >= 0x7F && c <= 0x9F)) {
            f |= F_CTRL;
        }
        if (c == 0x1B) f |= F_ESC;
        if (c == 0xFFFD) f |= F_FFFD;
        if (c == 0xC2 || c == 0xC3 || c == 0xD0 || c == 0xD1 || (c >= 0xE0 && c <= 0xF0) ||
            is_glue(c)) {
            f |= F_MOJI;
        }
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f') {
            f |= F_SPACE;
        } else if (is_punct(c)) {
            f |= F_PUNCT;
        }
        FLAGS[c] = (unsigned char)f;
        GROUP[c] = group_of(c);
    }
}

static inline char group_at(const Text *t, Py_ssize_t i)
{
    Py_UCS4 c = CH(t, i);
    return c < 0x10000 ? GROUP[c] : '.';
}

/* ---- script mix (scripts.find_script_mix) --------------------------------------------------- */

static inline int is_group(char g) { return g != ' ' && g != '.'; }

static int sentence_end_in(const Text *t, Py_ssize_t a, Py_ssize_t b)
{
    for (Py_ssize_t k = a; k < b && k < t->n; k++) {
        switch (CH(t, k)) {
        case '.': case '!': case '?': case '\n':
        case 0x3002: case 0xFF01: case 0xFF1F: case 0x0964: case 0x06D4: case 0x061F:
            return 1;
        default:
            break;
        }
    }
    return 0;
}

/* the word at pos has two letters of its group going in step's direction (CJK: one) */
static int is_word(const Text *t, Py_ssize_t pos, char group, int step)
{
    if (group == 'J') {
        return 1;
    }
    Py_ssize_t other = pos + step;
    return other >= 0 && other < t->n && group_at(t, other) == group;
}

typedef struct {
    Py_ssize_t pos;
    char before, after;
} Switch;

typedef struct {
    Switch ring[MAX_SWITCHES];
    Py_ssize_t points, seen;
    int done; /* 1: found, or the examined-switch cap reached */
    Py_ssize_t start, end, ngroups;
    char groups[2 * MAX_SWITCHES];
} Mix;

/* One switch point of scripts._SWITCH (a group letter, only spaces, a letter of another
 * group), in order: the bookkeeping find_script_mix does per match. */
static void on_switch(const Text *t, Mix *m, Py_ssize_t p, char b, Py_ssize_t q, char a)
{
    const Py_ssize_t need = L.script_min_switches;
    if (m->seen >= L.script_max_switches) {
        m->done = 1;
        return;
    }
    m->seen++;
    if (!is_word(t, p, b, -1) || !is_word(t, q, a, 1)) {
        return; /* one-letter words (math variables, initials) do not count */
    }
    Switch *slot = &m->ring[m->points % need];
    slot->pos = p;
    slot->before = b;
    slot->after = a;
    m->points++;
    if (m->points < need) {
        return;
    }
    const Switch *first = &m->ring[m->points % need]; /* the oldest of the last `need` */
    const Switch *last = &m->ring[(m->points - 1) % need];
    if (last->pos - first->pos > L.script_span) {
        return;
    }
    Py_ssize_t nf = 0;
    for (Py_ssize_t s = 0; s < need; s++) {
        char pair[2] = {m->ring[s].before, m->ring[s].after};
        for (int h = 0; h < 2; h++) {
            Py_ssize_t u = 0;
            while (u < nf && m->groups[u] != pair[h]) {
                u++;
            }
            if (u == nf) {
                m->groups[nf++] = pair[h];
            }
        }
    }
    if (nf >= L.script_min_groups && !sentence_end_in(t, first->pos, last->pos + 1)) {
        m->start = first->pos;
        m->end = last->pos + 1;
        m->ngroups = nf;
        m->done = 1;
    }
}

/* ---- character-level leaks (textcheck.py: _CTRL, _MOJIBAKE, U+FFFD, the salad screen) ---- */

/* a UTF-8 continuation byte as it looks after a wrong decode (textcheck._CONT) */
static int is_cont(Py_UCS4 c)
{
    if ((c >= 0x80 && c <= 0xBF) || (c >= 0x122 && c <= 0x143)) {
        return 1;
    }
    switch (c) {
    case 0x152: case 0x153: case 0x160: case 0x161: case 0x178: case 0x17D: case 0x17E:
    case 0x192: case 0x2C6: case 0x2DC:
    case 0x2013: case 0x2014: case 0x2018: case 0x2019: case 0x201A: case 0x201C:
    case 0x201D: case 0x201E: case 0x2020: case 0x2021: case 0x2022: case 0x2026:
    case 0x2030: case 0x2039: case 0x203A: case 0x20AC: case 0x2122:
        return 1;
    default:
        return 0;
    }
}

/* what may stand before a glued Ġ Ċ ĉ: [a-z0-9.,;:!?)\]}'"] */
static int glue_before(Py_UCS4 c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (c > 0 && c < 0x80 && strchr(".,;:!?)]}'\"", (int)c) != NULL);
}

static int ascii_alnum(Py_UCS4 c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

typedef struct {
    Py_ssize_t control[MAX_HITS], ncontrol;
    Py_ssize_t replacement[MAX_HITS], nreplacement;
    Py_ssize_t moji_start[MAX_HITS], moji_end[MAX_HITS], nmoji, moji_next;
    Py_ssize_t run;
    int salad;
} Leaks;

static void add_moji(Leaks *r, Py_ssize_t a, Py_ssize_t b)
{
    r->moji_start[r->nmoji] = a;
    r->moji_end[r->nmoji++] = b;
    r->moji_next = b; /* finditer: matches do not overlap */
}

/* A character flagged F_RARE at i. textcheck._MOJIBAKE's matches are found left to right as
 * finditer finds them: a Latin-1 lead starts branches 1-3 at i; a glued Ġ Ċ ĉ at i ends a
 * branch-4 match that starts at i-1 (an ASCII character, where no other branch can match),
 * else may start ĠĠ / ĊĊ at i. */
static void on_rare(const Text *t, Leaks *r, Py_ssize_t i, Py_UCS4 c, unsigned f)
{
    Py_ssize_t n = t->n;
    if ((f & F_CTRL) && r->ncontrol < MAX_HITS) {
        r->control[r->ncontrol++] = i;
    }
    if ((f & F_ESC) && r->ncontrol < MAX_HITS && !(i + 1 < n && CH(t, i + 1) == '[')) {
        r->control[r->ncontrol++] = i;
    }
    if ((f & F_FFFD) && r->nreplacement < MAX_HITS) {
        r->replacement[r->nreplacement++] = i;
    }
    if (!(f & F_MOJI) || r->nmoji >= MAX_HITS) {
        return;
    }
    if (is_glue(c)) {
        if (i >= 1 && i - 1 >= r->moji_next && glue_before(CH(t, i - 1)) && i + 1 < n &&
            ascii_alnum(CH(t, i + 1))) {
            add_moji(r, i - 1, i + 1);
        } else if (i >= r->moji_next && c != 0x109 && i + 1 < n && CH(t, i + 1) == c) {
            add_moji(r, i, i + 2);
        }
        return;
    }
    if (i < r->moji_next) {
        return;
    }
    if ((c == 0xC2 || c == 0xC3 || c == 0xD0 || c == 0xD1) && i + 1 < n && is_cont(CH(t, i + 1))) {
        add_moji(r, i, i + 2);
    } else if (c >= 0xE0 && c <= 0xEF && i + 2 < n && is_cont(CH(t, i + 1)) &&
               is_cont(CH(t, i + 2))) {
        add_moji(r, i, i + 3);
    } else if (c == 0xF0 && i + 3 < n && is_cont(CH(t, i + 1)) && is_cont(CH(t, i + 2)) &&
               is_cont(CH(t, i + 3))) {
        add_moji(r, i, i + 4);
    }
}

/* ---- the canonical block (fastpath.py: _canonical_calls) ------------------------------------ */

/* text[pos:pos+len(lit)] == lit, reading past body_end as str.startswith does (bounded: 0) or
 * only up to `bound`, as a regex match with endpos=bound does */
static int lit_at(const Text *t, Py_ssize_t pos, const Text *lit, Py_ssize_t bound)
{
    if (pos < 0 || pos + lit->n > bound) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < lit->n; k++) {
        if (CH(t, pos + k) != CH(lit, k)) {
            return 0;
        }
    }
    return 1;
}

static Py_ssize_t find_char(const Text *t, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end)
{
    for (Py_ssize_t k = start < 0 ? 0 : start; k < end; k++) {
        if (CH(t, k) == ch) {
            return k;
        }
    }
    return -1;
}

/* structure.name_problem is not "": empty, over 256 characters, or whitespace (\s), a quote,
 * bracket, backtick, backslash, bar (ASCII or fullwidth) or control character */
static int bad_name(const Text *t, Py_ssize_t a, Py_ssize_t b)
{
    if (b <= a || b - a > 256) {
        return 1;
    }
    for (Py_ssize_t k = a; k < b; k++) {
        Py_UCS4 c = CH(t, k);
        if (c <= 0x1F || c == 0x7F || c == 0xFF5C || Py_UNICODE_ISSPACE(c)) {
            return 1;
        }
        switch (c) {
        case '"': case '\'': case '<': case '>': case '`': case '\\': case '|':
            return 1;
        default:
            break;
        }
    }
    return 0;
}

typedef struct {
    Text invoke, param, param_close, invoke_close, block_close;
    int self_closing;
    Py_ssize_t close_dsml; /* where "DSML" sits in param_close */
} Spelling;

typedef struct {
    Py_ssize_t key, key_end, vstart, vend;
    int is_true;
} Param;

/* every parameter of the block, in order (most blocks have a few: no allocation then) */
typedef struct {
    Param *v;
    Py_ssize_t n, cap;
    Param local[32];
} Params;

static int push_param(Params *ps, const Param *p)
{
    if (ps->n == ps->cap) {
        Py_ssize_t cap = 2 * ps->cap;
        Param *grown = PyMem_Malloc(sizeof(Param) * (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return 0;
        }
        memcpy(grown, ps->v, sizeof(Param) * (size_t)ps->n);
        if (ps->v != ps->local) {
            PyMem_Free(ps->v);
        }
        ps->v = grown;
        ps->cap = cap;
    }
    ps->v[ps->n++] = *p;
    return 1;
}

static const Text QUOTE_GT_NL = {PyUnicode_1BYTE_KIND, "\">\n", 3};
static const Text QUOTE_SELF_NL = {PyUnicode_1BYTE_KIND, "\"/>\n", 4};
static const Text STRING_EQ = {PyUnicode_1BYTE_KIND, "\" string=\"", 10};
static const Text TRUE_GT = {PyUnicode_1BYTE_KIND, "true\">", 6};
static const Text FALSE_GT = {PyUnicode_1BYTE_KIND, "false\">", 7};
static const Text DSML = {PyUnicode_1BYTE_KIND, "DSML", 4};

/* the parameter opener at pos up to its ">" (fastpath's param_head, bounded by e):
 * 1 and the key and flag, or 0 */
static int param_head(const Text *t, const Spelling *sp, Py_ssize_t pos, Py_ssize_t e, Param *out)
{
    if (!lit_at(t, pos, &sp->param, e)) {
        return 0;
    }
    Py_ssize_t k0 = pos + sp->param.n;
    Py_ssize_t q = find_char(t, '"', k0, e);
    if (q < 0 || !lit_at(t, q, &STRING_EQ, e)) {
        return 0;
    }
    Py_ssize_t f = q + STRING_EQ.n;
    out->key = k0;
    out->key_end = q;
    if (lit_at(t, f, &TRUE_GT, e)) {
        out->is_true = 1;
        out->vstart = f + TRUE_GT.n;
    } else if (lit_at(t, f, &FALSE_GT, e)) {
        out->is_true = 0;
        out->vstart = f + FALSE_GT.n;
    } else {
        return 0;
    }
    return 1;
}

static Py_ssize_t find_dsml(const Text *t, Py_ssize_t start, Py_ssize_t end)
{
    for (Py_ssize_t k = start; k + 4 <= end; k++) {
        if (CH(t, k) == 'D' && lit_at(t, k, &DSML, end)) {
            return k;
        }
    }
    return -1;
}

/* One invoke's parameters from pos. Returns the position after the last one, -1 when
 * something is not canonical (the Python reference returns None there), -2 on MemoryError.
 * A repeated key is left to the caller, whose dict finds it in O(1). */
static Py_ssize_t canonical_params(const Text *t, const Spelling *sp, Py_ssize_t pos, Py_ssize_t e,
                                   Params *ps)
{
    Py_ssize_t n = t->n;
    for (;;) {
        Param p;
        Py_ssize_t next;
        if (!param_head(t, sp, pos, e, &p)) {
            if (lit_at(t, pos, &sp->param, n)) {
                return -1; /* a parameter opener that is not canonical */
            }
            return pos;
        }
        /* the whole parameter (fastpath's param_whole): a value free of "<" and "D" up to
         * the closer and its newline, all before e */
        Py_ssize_t v = p.vstart;
        while (v < e) {
            Py_UCS4 c = CH(t, v);
            if (c == '<' || c == 'D') {
                break;
            }
            v++;
        }
        if (lit_at(t, v, &sp->param_close, e) && v + sp->param_close.n < e &&
            CH(t, v + sp->param_close.n) == '\n') {
            p.vend = v;
            next = v + sp->param_close.n + 1;
        } else {
            /* the value ends at the first closer: the first "DSML" after the opener is the
             * closer's exactly when the value holds none */
            Py_ssize_t d = find_dsml(t, p.vstart, e);
            p.vend = d < 0 ? -1 : d - sp->close_dsml;
            if (d < 0 || p.vend < p.vstart || !lit_at(t, p.vend, &sp->param_close, n) ||
                p.vend + sp->param_close.n > e) {
                return -1;
            }
            for (Py_ssize_t k = p.vstart; k + 1 < p.vend; k++) {
                if (CH(t, k) == '<') {
                    Py_UCS4 c = CH(t, k + 1);
                    if (c == 0xFF5C || c == '|') {
                        return -1; /* a tag or special token inside the value */
                    }
                }
            }
            next = p.vend + sp->param_close.n;
            if (!(next < n && CH(t, next) == '\n')) {
                return -1;
            }
            next++;
        }
        if (bad_name(t, p.key, p.key_end)) {
            return -1;
        }
        if (!push_param(ps, &p)) {
            return -2;
        }
        pos = next;
    }
}

static int text_of(PyObject *obj, Text *out)
{
    if (!PyUnicode_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "spelling pieces must be str");
        return 0;
    }
    out->kind = PyUnicode_KIND(obj);
    out->data = PyUnicode_DATA(obj);
    out->n = PyUnicode_GET_LENGTH(obj);
    return 1;
}

PyDoc_STRVAR(canonical_doc,
"canonical_calls(text, pos, body_end, spelling) -> None | (calls, block_end)\n\n"
"The invokes of a canonical block from pos (after the block opener): calls are\n"
"(name, start, end, params), params (key, is_string, value_start, value_end). None when\n"
"anything is not canonical. spelling: (invoke, param, param_close, invoke_close + newline,\n"
"block_close, self_closing, offset of DSML in param_close). See fastpath._canonical_calls.");

static PyObject *canonical_calls(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *text, *spelling;
    Py_ssize_t pos, e;
    if (!PyArg_ParseTuple(args, "UnnO!:canonical_calls", &text, &pos, &e, &PyTuple_Type,
                          &spelling)) {
        return NULL;
    }
    Spelling sp;
    if (PyTuple_GET_SIZE(spelling) != 7 || !text_of(PyTuple_GET_ITEM(spelling, 0), &sp.invoke) ||
        !text_of(PyTuple_GET_ITEM(spelling, 1), &sp.param) ||
        !text_of(PyTuple_GET_ITEM(spelling, 2), &sp.param_close) ||
        !text_of(PyTuple_GET_ITEM(spelling, 3), &sp.invoke_close) ||
        !text_of(PyTuple_GET_ITEM(spelling, 4), &sp.block_close)) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "spelling is a 7-tuple");
        }
        return NULL;
    }
    sp.self_closing = PyObject_IsTrue(PyTuple_GET_ITEM(spelling, 5));
    sp.close_dsml = PyLong_AsSsize_t(PyTuple_GET_ITEM(spelling, 6));
    if (sp.self_closing < 0 || (sp.close_dsml == -1 && PyErr_Occurred())) {
        return NULL;
    }
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    if (e > t.n) {
        e = t.n;
    }
    if (pos < 0 || e < 0) {
        Py_RETURN_NONE;
    }
    Params ps;
    ps.v = ps.local;
    ps.n = 0;
    ps.cap = (Py_ssize_t)(sizeof ps.local / sizeof ps.local[0]);
    Py_ssize_t cap_calls = 0, ncalls = 0;
    typedef struct {
        Py_ssize_t name, name_end, start, end, first, last;
    } Call;
    Call *calls = NULL;
    PyObject *result = NULL;
    while (lit_at(&t, pos, &sp.invoke, t.n)) {
        Call c;
        c.start = pos;
        c.name = pos + sp.invoke.n;
        Py_ssize_t q = find_char(&t, '"', c.name, e);
        if (q < 0 || bad_name(&t, c.name, q)) {
            goto not_canonical;
        }
        c.name_end = q;
        c.first = ps.n;
        if (lit_at(&t, q, &QUOTE_GT_NL, t.n)) {
            pos = canonical_params(&t, &sp, q + 3, e, &ps);
            if (pos == -2) {
                goto done;
            }
            if (pos < 0 || !lit_at(&t, pos, &sp.invoke_close, t.n)) {
                goto not_canonical;
            }
            c.end = pos + sp.invoke_close.n - 1;
            pos = c.end + 1;
        } else if (sp.self_closing && lit_at(&t, q, &QUOTE_SELF_NL, t.n)) {
            c.end = q + 3;
            pos = c.end + 1;
        } else {
            goto not_canonical;
        }
        c.last = ps.n;
        if (ncalls == cap_calls) {
            cap_calls = cap_calls ? 2 * cap_calls : 8;
            Call *grown = PyMem_Realloc(calls, sizeof(Call) * (size_t)cap_calls);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            calls = grown;
        }
        calls[ncalls++] = c;
    }
    if (ncalls == 0 || !lit_at(&t, pos, &sp.block_close, t.n)) {
        goto not_canonical;
    }
    Py_ssize_t block_end = pos + sp.block_close.n;
    if (block_end > e) {
        goto not_canonical;
    }
    for (Py_ssize_t k = block_end; k < e; k++) {
        if (!Py_UNICODE_ISSPACE(CH(&t, k))) {
            goto not_canonical; /* text after the block */
        }
    }
    PyObject *out = PyTuple_New(ncalls);
    if (out == NULL) {
        goto done;
    }
    for (Py_ssize_t k = 0; k < ncalls; k++) {
        const Call *c = &calls[k];
        PyObject *plist = PyTuple_New(c->last - c->first);
        PyObject *name = plist ? PyUnicode_Substring(text, c->name, c->name_end) : NULL;
        if (name == NULL) {
            Py_XDECREF(plist);
            Py_DECREF(out);
            goto done;
        }
        for (Py_ssize_t j = c->first; j < c->last; j++) {
            const Param *p = &ps.v[j];
            PyObject *key = PyUnicode_Substring(text, p->key, p->key_end);
            PyObject *item = key ? Py_BuildValue("(NOnn)", key, p->is_true ? Py_True : Py_False,
                                                 p->vstart, p->vend)
                                 : NULL;
            if (item == NULL) {
                Py_DECREF(name);
                Py_DECREF(plist);
                Py_DECREF(out);
                goto done;
            }
            PyTuple_SET_ITEM(plist, j - c->first, item);
        }
        PyObject *call = Py_BuildValue("(NnnN)", name, c->start, c->end, plist);
        if (call == NULL) {
            Py_DECREF(out);
            goto done;
        }
        PyTuple_SET_ITEM(out, k, call);
    }
    result = Py_BuildValue("(Nn)", out, block_end);
    goto done;
not_canonical:
    result = Py_NewRef(Py_None);
done:
    if (ps.v != ps.local) {
        PyMem_Free(ps.v);
    }
    PyMem_Free(calls);
    return result;
}

/* ---- screens of the once-per-sample checks (phenotypes.py) ----------------------------------
 *
 * Each answers one yes/no question a phenotype check asks before its exact pass, exactly as
 * its Python twin does (phenotypes._may_glue, phenotypes.prose_screens_python,
 * phenotypes.value_screens_python); the exact passes stay in Python. */

/* phenotypes._glue_table's class of one character: the class of its UTF-8 lead byte */
static char glue_class(Py_UCS4 c)
{
    if (c < 0x80) {
        return ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ? 'a' : ' ';
    }
    if (c >= 0xC0 && c <= 0x27F) return 'a';    /* leads C3-C9 */
    if (c >= 0x340 && c <= 0x3FF) return 'g';   /* CD-CF */
    if (c >= 0x400 && c <= 0x4FF) return 'c';   /* D0-D3 */
    if (c >= 0x5C0 && c <= 0x5FF) return 'h';   /* D7 */
    if (c >= 0x600 && c <= 0x67F) return 'r';   /* D8-D9 */
    if (c >= 0x800 && c <= 0xFFF) return 'i';   /* E0 */
    if (c >= 0x3000 && c <= 0xDFFF) return 'e'; /* E3-ED */
    return ' ';
}

/* Per BMP character, for prose_screens' one pass: its glue class as a code (GLUE_CODES) and
 * whether it is str.split's whitespace (P_SPACE); built once at import. */
static const char GLUE_CODES[] = " agchrie";
#define P_SPACE 8
#define P_CODE 7
static unsigned char PROSE[0x10000];

static void build_prose_table(void)
{
    for (Py_UCS4 c = 0; c < 0x10000; c++) {
        unsigned code = (unsigned)(strchr(GLUE_CODES, glue_class(c)) - GLUE_CODES);
        PROSE[c] = (unsigned char)(code | (Py_UNICODE_ISSPACE(c) ? P_SPACE : 0));
    }
}

static inline unsigned prose_bits(Py_UCS4 c)
{
    /* beyond the BMP: glue class space (no alphabet there), whitespace as str.split says */
    return c < 0x10000 ? PROSE[c] : (Py_UNICODE_ISSPACE(c) ? P_SPACE : 0);
}

/* Characters of glue codes a and b touch as two scripts: both alphabets, different, and not
 * Latin ('a', 1) and East Asian ('e', 7) alone (phenotypes._may_glue's pairs) */
static inline int code_seam(unsigned a, unsigned b)
{
    return a != b && a && b && !((a == 1 || a == 7) && (b == 1 || b == 7));
}

/* code_seam of every pair of glue codes, for the character loop (built at import) */
static unsigned char SEAM[8][8];

static void build_seam_table(void)
{
    for (unsigned a = 0; a < 8; a++) {
        for (unsigned b = 0; b < 8; b++) {
            SEAM[a][b] = (unsigned char)code_seam(a, b);
        }
    }
}

PyDoc_STRVAR(may_glue_doc,
"may_glue(text) -> bool\n\n"
"phenotypes._may_glue: two adjacent characters of different script classes, one of them a\n"
"non-Latin alphabet (Greek, Cyrillic, Hebrew, Arabic, U+0800-U+0FFF).");

static PyObject *may_glue(PyObject *Py_UNUSED(self), PyObject *arg)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_SetString(PyExc_TypeError, "may_glue() takes a str");
        return NULL;
    }
    if (PyUnicode_IS_ASCII(arg)) {
        Py_RETURN_FALSE; /* one class only: Latin */
    }
    Text t = {PyUnicode_KIND(arg), PyUnicode_DATA(arg), PyUnicode_GET_LENGTH(arg)};
    unsigned prev = 0;
    for (Py_ssize_t i = 0; i < t.n; i++) {
        unsigned cur = prose_bits(CH(&t, i)) & P_CODE;
        if (code_seam(prev, cur)) {
            Py_RETURN_TRUE;
        }
        prev = cur;
    }
    Py_RETURN_FALSE;
}

/* Whether some window of ``probe`` characters starting at a multiple of ``stride`` (from
 * ``stride`` on: the probes) also starts earlier in ``s``: 1, 0, or -1 with MemoryError set.
 *
 * A window at j holds, whole, the block of B characters (2B - 1 <= probe) that starts at the
 * first multiple of B at or after j (o = that start - j is below B, and o + B <= probe). So a
 * probe at pos seen at j < pos means the block at j + o equals the probe's characters from o.
 * Every such piece of every probe (B per probe) goes into a hash table first; then only the
 * blocks at multiples of B are hashed and looked up, and a piece found there is compared in
 * full, as the window it implies, with its probe: exact, linear, and one lookup per B
 * characters (a rolling hash of every window cost one per character). */
#define MAX_PROBES 1024
static int probe_seen_before(const Py_UCS4 *s, Py_ssize_t n, Py_ssize_t probe, Py_ssize_t stride)
{
    Py_ssize_t last = (n - probe) / stride * stride; /* the last probe's start */
    if (last < stride) {
        return 0;
    }
    if (last / stride > MAX_PROBES) {
        return 1; /* not with the thresholds (screen_max / stride probes): "may", as a screen */
    }
    /* B: the largest power of two with 2B - 1 <= probe (so the pieces index by shifts) */
    int lb = 0;
    while (((Py_ssize_t)2 << lb) * 2 - 1 <= probe) {
        lb++;
    }
    const Py_ssize_t B = (Py_ssize_t)1 << lb, nprobes = last / stride;
    /* hash of s[x:x+B]: sum of s[x+k] * R^(B-1-k) mod 2^64, high bits used */
    const uint64_t R = 0x9E3779B97F4A7C15u;
    uint64_t top = 1; /* R^(B-1) */
    for (Py_ssize_t k = 1; k < B; k++) {
        top *= R;
    }
    const Py_ssize_t pieces = nprobes * B; /* piece x: probe x >> lb, at offset o = x & (B-1) */
    int bits = 4;
    while (((Py_ssize_t)1 << bits) < pieces) {
        bits++;
    }
    const Py_ssize_t cap = (Py_ssize_t)1 << bits;
    /* chained hash table: head[slot] the last piece in the slot (-1: none), next[x] the one
     * before it; then the keys, then the block weights R^(B-1-k), in one allocation */
    const Py_ssize_t pad = pieces & 1; /* so the keys start 8-byte aligned (cap is even) */
    int32_t *head = PyMem_Malloc(sizeof(int32_t) * (size_t)(cap + pieces + pad) +
                                 sizeof(uint64_t) * (size_t)(pieces + B));
    if (head == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int32_t *next = head + cap;
    uint64_t *key = (uint64_t *)(next + pieces + pad);
    uint64_t *weight = key + pieces;
    memset(head, 0xFF, sizeof(int32_t) * (size_t)cap);
    weight[B - 1] = 1;
    for (Py_ssize_t k = B - 1; k > 0; k--) {
        weight[k - 1] = weight[k] * R;
    }
#define SLOT_OF(h) ((Py_ssize_t)((h) >> (64 - bits)))
    for (Py_ssize_t x = 0; x < pieces; x++) {
        const Py_ssize_t pos = stride * ((x >> lb) + 1), o = x & (B - 1);
        uint64_t h = 0;
        if (o == 0) {
            for (Py_ssize_t k = 0; k < B; k++) {
                h = h * R + s[pos + k];
            }
        } else { /* drop s[pos+o-1], take s[pos+o+B-1] */
            h = (key[x - 1] - s[pos + o - 1] * top) * R + s[pos + o + B - 1];
        }
        key[x] = h;
        next[x] = head[SLOT_OF(h)];
        head[SLOT_OF(h)] = (int32_t)x;
    }
    int found = 0;
    /* a window at j < last covers the block at j + o < last + B */
    for (Py_ssize_t b = 0; !found && b < last + B && b + B <= n; b += B) {
        uint64_t h0 = 0, h1 = 0; /* two sums: the multiplies do not wait on one chain */
        for (Py_ssize_t k = 0; k + 1 < B; k += 2) {
            h0 += s[b + k] * weight[k];
            h1 += s[b + k + 1] * weight[k + 1];
        }
        const uint64_t h = h0 + h1 + (B == 1 ? s[b] * weight[0] : 0);
        for (int32_t x = head[SLOT_OF(h)]; x >= 0; x = next[x]) {
            const Py_ssize_t pos = stride * ((x >> lb) + 1), j = b - (x & (B - 1));
            if (key[x] == h && j >= 0 && j < pos &&
                memcmp(s + pos, s + j, probe * sizeof *s) == 0) {
                found = 1;
                break;
            }
        }
    }
#undef SLOT_OF
    PyMem_Free(head);
    return found;
}

#define MAX_NEEDLES 16

PyDoc_STRVAR(prose_screens_doc,
"prose_screens(text, need, ngram, probe, screen_max, needles) -> (loop, template, glue)\n\n"
"phenotypes.prose_screens_python, in one pass: loop, whether the prose-loop pass can find a\n"
"loop (at least need * 2 characters, need + ngram words, and on the words joined by single\n"
"spaces a probe of ``probe`` characters every 2 * need - probe that also occurs earlier, or\n"
"a joined text longer than screen_max); template, whether one of the ASCII ``needles``\n"
"occurs; glue, phenotypes._may_glue.");

/* The state of prose_screens' one pass, so the fused scan_prose runs the same steps. */
typedef struct {
    Py_ssize_t need, ngram, probe, stride, screen_max;
    Text lit[MAX_NEEDLES];
    Py_ssize_t nneedles;
    uint64_t first[2]; /* the needles' first characters (ASCII) */
    Py_UCS4 *buf;      /* the words (str.split's whitespace) joined by single spaces */
    Py_ssize_t words, joined;
    int in_word, template, glue;
    unsigned prev; /* the glue code of the character before */
} Prose;

/* Check the numbers and needles, and allocate the joined buffer for text t: 1, or 0 with an
 * exception set (nothing to free then). */
static int prose_init(Prose *p, const Text *t, int ascii, Py_ssize_t need, Py_ssize_t ngram,
                      Py_ssize_t probe, Py_ssize_t screen_max, PyObject *needles)
{
    memset(p, 0, sizeof *p);
    p->need = need;
    p->ngram = ngram;
    p->probe = probe;
    p->stride = 2 * need - probe;
    p->screen_max = screen_max;
    p->nneedles = PyTuple_GET_SIZE(needles);
    if (probe < 1 || p->stride < 1 || p->nneedles > MAX_NEEDLES) {
        PyErr_SetString(PyExc_ValueError, "prose_screens: probe and 2 * need - probe must be "
                                          ">= 1, and at most 16 needles");
        return 0;
    }
    for (Py_ssize_t k = 0; k < p->nneedles; k++) {
        PyObject *nd = PyTuple_GET_ITEM(needles, k);
        if (!PyUnicode_Check(nd) || !PyUnicode_IS_ASCII(nd) || PyUnicode_GET_LENGTH(nd) < 1) {
            PyErr_SetString(PyExc_TypeError, "prose_screens: needles are non-empty ASCII str");
            return 0;
        }
        text_of(nd, &p->lit[k]);
        Py_UCS4 c = CH(&p->lit[k], 0);
        p->first[c >> 6] |= (uint64_t)1 << (c & 63);
    }
    p->glue = ascii; /* ASCII: Latin only, nothing to glue */
    p->buf = PyMem_Malloc((t->n + 1) * sizeof *p->buf);
    if (p->buf == NULL) {
        PyErr_NoMemory();
        return 0;
    }
    return 1;
}

/* FLAGS | GROUP << 8 | PROSE << 16, and three bits that save the loop a comparison or two:
 * the group byte is a letter (not ' ' or '.'), it is '.', the character is '<' or 'D' (where
 * a tag or DSML may start). Built at import. */
#define E_LETTER (1u << 20)
#define E_DOT (1u << 21)
#define E_TAG (1u << 22)
static uint32_t FUSED[0x10000];
/* Per block of 256 characters, the entry all of them share, or MIXED: most scripts' letters
 * (CJK, Hangul, Cyrillic, ...) fill whole blocks, and a 1 KiB table stays in the L1 cache where
 * reading FUSED (256 KiB) for text spread over thousands of CJK characters missed it. */
#define MIXED 0xFFFFFFFFu
static uint32_t UNIFORM[0x100];

static void build_fused_table(void)
{
    for (Py_UCS4 c = 0; c < 0x10000; c++) {
        FUSED[c] = (uint32_t)FLAGS[c] | (uint32_t)(unsigned char)GROUP[c] << 8 |
                   (uint32_t)PROSE[c] << 16 | (is_group(GROUP[c]) ? E_LETTER : 0) |
                   (GROUP[c] == '.' ? E_DOT : 0) | (c == '<' || c == 'D' ? E_TAG : 0);
    }
    for (Py_UCS4 b = 0; b < 0x100; b++) {
        UNIFORM[b] = FUSED[b << 8];
        for (Py_UCS4 c = b << 8; c < (b + 1) << 8; c++) {
            if (FUSED[c] != UNIFORM[b]) {
                UNIFORM[b] = MIXED;
                break;
            }
        }
    }
}

static inline uint32_t fused_of(Py_UCS4 c)
{
    if (c >= 0x10000) { /* beyond the BMP: no flags, group_at's '.', prose_bits' answer */
        return (uint32_t)'.' << 8 | (uint32_t)prose_bits(c) << 16 | E_DOT;
    }
    uint32_t u = UNIFORM[c >> 8];
    return u != MIXED ? u : FUSED[c];
}

/* The character passes of scan() and prose_screens(), those `want` names, in one loop:
 *   PASS_LEAKS  control characters, U+FFFD, mojibake (on_rare) and the salad screen's run of
 *               punctuation classes (whitespace does not break a run: it is deleted);
 *   PASS_MIX    the switch points of scripts._SWITCH: the last group letter with only spaces
 *               since is the one a letter of another group switches from (on_switch), until
 *               found or the cap on switches examined is reached;
 *   PASS_PROSE  prose_screens' template needles, glue seams, and the words joined by single
 *               spaces into p->buf;
 *   PASS_TAGS   whether the text holds "<" or "DSML" (*tags): where it holds neither,
 *               tokens.scan has no event to find.
 * The state every character updates lives in locals, so it stays in registers (through
 * p->buf or a struct, a store to the joined text may alias it and forces reloads); the rare
 * events go through on_rare/on_switch. One table lookup per character (fused_of). */
enum { PASS_LEAKS = 1, PASS_MIX = 2, PASS_PROSE = 4, PASS_TAGS = 8 };

/* inlined where called, so each caller's constant `want` leaves only its own passes */
#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

static ALWAYS_INLINE void char_passes(const Text *t, int want, Leaks *r, Mix *m, Prose *p,
                                      int *tags)
{
    const Py_ssize_t n = t->n, salad_min = L.salad_min_run;
    Py_ssize_t run = 0, prev = -1, words = 0, joined = 0;
    char prev_group = 0;
    int salad = 0, in_word = 0, template = 0, glue = 1, mix_done = !(want & PASS_MIX);
    int tagged = 0;
    unsigned prev_code = 0;
    Py_UCS4 *buf = NULL;
    if (want & PASS_LEAKS) {
        memset(r, 0, sizeof *r);
    }
    if (want & PASS_MIX) {
        memset(m, 0, sizeof *m);
    }
    if (want & PASS_PROSE) {
        buf = p->buf;
        glue = p->glue;
    }
#define CHAR_PASSES(TYPE)                                                                    \
    do {                                                                                     \
        const TYPE *d = (const TYPE *)t->data;                                               \
        for (Py_ssize_t i = 0; i < n; i++) {                                                 \
            const Py_UCS4 c = d[i];                                                          \
            const uint32_t e = fused_of(c);                                                  \
            if ((want & PASS_TAGS) && (e & E_TAG) && !tagged) {                              \
                tagged = c == '<' || (i + 3 < n && d[i + 1] == 'S' && d[i + 2] == 'M' &&     \
                                      d[i + 3] == 'L');                                      \
            }                                                                                \
            if (want & PASS_LEAKS) {                                                         \
                const unsigned f = e & 0xFF;                                                 \
                if (f & F_RARE) {                                                            \
                    on_rare(t, r, i, c, f);                                                  \
                }                                                                            \
                /* whitespace keeps the run; punctuation extends it; anything else ends it */ \
                const Py_ssize_t more = (f & F_PUNCT) ? run + 1 : 0;                         \
                run = (f & F_SPACE) ? run : more;                                            \
                salad |= run >= salad_min;                                                   \
            }                                                                                \
            if (!mix_done) {                                                                 \
                const char g = (char)(e >> 8);                                               \
                const int letter = (e & E_LETTER) != 0;                                      \
                if (letter && prev >= 0 && prev_group != g) { /* rare: a switch */           \
                    on_switch(t, m, prev, prev_group, i, g);                                 \
                    mix_done = m->done;                                                      \
                }                                                                            \
                /* a letter is the new last one, "." forgets it, a space keeps it */         \
                prev = letter ? i : (e & E_DOT) ? -1 : prev;                                 \
                prev_group = letter ? g : prev_group;                                        \
            }                                                                                \
            if (want & PASS_PROSE) {                                                         \
                const unsigned bits = e >> 16;                                               \
                if (c < 128 && !template && ((p->first[c >> 6] >> (c & 63)) & 1)) {          \
                    for (Py_ssize_t k = 0; k < p->nneedles && !template; k++) {              \
                        template = lit_at(t, i, &p->lit[k], n);                              \
                    }                                                                        \
                }                                                                            \
                if (!glue) {                                                                 \
                    glue = SEAM[prev_code][bits & P_CODE];                                   \
                    prev_code = bits & P_CODE;                                               \
                }                                                                            \
                /* without branches (a word boundary every few characters): both stores   \
                 * land inside buf, as joined never passes i; only the counts say which stay */ \
                const int part = !(bits & P_SPACE), first = part & !in_word;                 \
                buf[joined] = ' ';                                                           \
                joined += first & (words > 0);                                               \
                words += first;                                                              \
                buf[joined] = c;                                                             \
                joined += part;                                                              \
                in_word = part;                                                              \
            }                                                                                \
        }                                                                                    \
    } while (0)
    switch (t->kind) {
    case PyUnicode_1BYTE_KIND:
        CHAR_PASSES(Py_UCS1);
        break;
    case PyUnicode_2BYTE_KIND:
        CHAR_PASSES(Py_UCS2);
        break;
    default:
        CHAR_PASSES(Py_UCS4);
        break;
    }
#undef CHAR_PASSES
    if (want & PASS_LEAKS) {
        r->salad = salad;
    }
    if (want & PASS_TAGS) {
        *tags = tagged;
    }
    if (want & PASS_PROSE) {
        p->words = words;
        p->joined = joined;
        p->template = template;
        p->glue = glue;
    }
}

/* The answers once every character has passed, as (loop, template, glue); frees the buffer. */
static PyObject *prose_finish(Prose *p, const Text *t, int ascii)
{
    int loop;
    if (t->n < p->need * 2 || p->words < p->need + p->ngram) {
        loop = 0;
    } else if (p->joined > p->screen_max) {
        loop = 1; /* the twin's probes would be quadratic: it runs the exact pass */
    } else {
        loop = probe_seen_before(p->buf, p->joined, p->probe, p->stride);
    }
    PyMem_Free(p->buf);
    p->buf = NULL;
    if (loop < 0) {
        return NULL; /* MemoryError */
    }
    int glue = ascii ? 0 : p->glue;
    return Py_BuildValue("(OOO)", loop ? Py_True : Py_False, p->template ? Py_True : Py_False,
                         glue ? Py_True : Py_False);
}

static PyObject *prose_screens(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *text, *needles;
    Py_ssize_t need, ngram, probe, screen_max;
    if (!PyArg_ParseTuple(args, "UnnnnO!:prose_screens", &text, &need, &ngram, &probe,
                          &screen_max, &PyTuple_Type, &needles)) {
        return NULL;
    }
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    int ascii = PyUnicode_IS_ASCII(text);
    Prose p;
    if (!prose_init(&p, &t, ascii, need, ngram, probe, screen_max, needles)) {
        return NULL;
    }
    char_passes(&t, PASS_PROSE, NULL, NULL, &p, NULL);
    return prose_finish(&p, &t, ascii);
}

/* re's \w for str patterns: str.isalnum() or "_" */
static inline int re_word(Py_UCS4 c)
{
    if (c < 0x80) { /* ASCII (most values): the database's answer, without the lookups */
        return c == '_' || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || (c >= '0' && c <= '9');
    }
    return Py_UNICODE_ISALPHA(c) || Py_UNICODE_ISDECIMAL(c) ||
           Py_UNICODE_ISDIGIT(c) || Py_UNICODE_ISNUMERIC(c);
}

/* re's [^\W\d_] for str patterns: a word character that is neither a digit nor "_" */
static inline int re_letter(Py_UCS4 c)
{
    if (c < 0x80) { /* ASCII: its digits are all decimal, so only the letters are left */
        return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
    }
    return (Py_UNICODE_ISALPHA(c) || Py_UNICODE_ISDIGIT(c) || Py_UNICODE_ISNUMERIC(c)) &&
           !Py_UNICODE_ISDECIMAL(c);
}

/* phenotypes._VALUE_LOOP matches somewhere: a unit of 1 to max_unit non-space characters,
 * after a word character or one of .,;:!?)] , with ``repeats`` copies back to back */
/* Whether text[k] == text[k - p] holds for (repeats - 1) * p positions in a row, for some unit
 * length p in 1..max_unit: what every run of ``repeats`` copies of a p-character unit is. Most
 * values have no such stretch, and skip the exact pass. Per p, a window of ``need`` positions
 * ending at k is read backwards down to the positions already known to hold (known): a
 * position that does not hold rules out every window over it, so the next window ends
 * ``need`` past it. Each position is read at most once, and on text without the stretch about
 * one in ``need`` is (the forward count of every position read them all). */
#define PERIOD_STRETCH(TYPE)                                                      \
    do {                                                                          \
        const TYPE *s = (const TYPE *)t->data;                                    \
        for (Py_ssize_t p = 1; p <= max_unit; p++) {                              \
            const Py_ssize_t need = (repeats - 1) * p;                            \
            /* the positions in (k - need, known] hold; known < k */              \
            Py_ssize_t known = p - 1, k = p - 1 + need;                           \
            while (k < n) {                                                       \
                Py_ssize_t j = k;                                                 \
                while (j > known && s[j] == s[j - p]) {                           \
                    j--;                                                          \
                }                                                                 \
                if (j == known) {                                                 \
                    return 1;                                                     \
                }                                                                 \
                known = k; /* (j, k] hold, text[j] == text[j - p] does not */     \
                k = j + need;                                                     \
            }                                                                     \
        }                                                                         \
    } while (0)

static int period_stretch(const Text *t, Py_ssize_t max_unit, Py_ssize_t repeats)
{
    const Py_ssize_t n = t->n;
    if (repeats <= 1) {
        return 1; /* one copy is a run: no stretch to look for */
    }
    switch (t->kind) {
    case PyUnicode_1BYTE_KIND:
        PERIOD_STRETCH(Py_UCS1);
        break;
    case PyUnicode_2BYTE_KIND:
        PERIOD_STRETCH(Py_UCS2);
        break;
    default:
        PERIOD_STRETCH(Py_UCS4);
        break;
    }
    return 0;
}
#undef PERIOD_STRETCH

static int glued_unit_run(const Text *t, Py_ssize_t max_unit, Py_ssize_t repeats)
{
    if (!period_stretch(t, max_unit, repeats)) {
        return 0; /* no unit repeats back to back anywhere: the regex cannot match */
    }
    for (Py_ssize_t i = 1; i < t->n; i++) {
        /* a run needs text[i + p] == text[i] for its unit's length p: tested first, as it is
           cheap; the look-behind class only where a unit can start */
        int candidate = 0;
        for (Py_ssize_t p = 1; p <= max_unit && i + p < t->n && !candidate; p++) {
            candidate = CH(t, i + p) == CH(t, i);
        }
        if (!candidate) {
            continue;
        }
        Py_UCS4 b = CH(t, i - 1);
        if (!(re_word(b) || (b < 0x80 && b != 0 && strchr(".,;:!?)]", (int)b) != NULL))) {
            continue;
        }
        for (Py_ssize_t p = 1; p <= max_unit && i + p <= t->n; p++) {
            if (Py_UNICODE_ISSPACE(CH(t, i + p - 1))) {
                break; /* the unit is \S: no longer unit either */
            }
            if (i + p * repeats > t->n) {
                break; /* longer units need even more room */
            }
            Py_ssize_t k = i + p, stop = i + p * repeats;
            while (k < stop && CH(t, k) == CH(t, k - p)) {
                k++;
            }
            if (k == stop) {
                return 1;
            }
        }
    }
    return 0;
}

/* phenotypes._WORD_RUN_SCREEN matches somewhere: at the start or after whitespace, a unit of
 * 1 to max_words words (letters, then one " ") with ``copies`` copies back to back. A word's
 * letters run to the first non-letter, which must be the space (backtracking to fewer letters
 * would put a letter where the space must be), so each unit size is one comparison. */
static int word_unit_run(const Text *t, Py_ssize_t max_words, Py_ssize_t copies)
{
    for (Py_ssize_t i = 0; i < t->n; i++) {
        if (i > 0 && !Py_UNICODE_ISSPACE(CH(t, i - 1))) {
            continue;
        }
        Py_ssize_t end = i;
        for (Py_ssize_t w = 0; w < max_words; w++) {
            Py_ssize_t j = end;
            while (j < t->n && re_letter(CH(t, j))) {
                j++;
            }
            if (j == end || j >= t->n || CH(t, j) != ' ') {
                break;
            }
            end = j + 1;
            Py_ssize_t len = end - i;
            if (i + len * copies > t->n) {
                break; /* longer units need even more room */
            }
            Py_ssize_t k = end, stop = i + len * copies;
            while (k < stop && CH(t, k) == CH(t, k - len)) {
                k++;
            }
            if (k == stop) {
                return 1;
            }
        }
    }
    return 0;
}

/* phenotypes._LETTER_RUN matches somewhere: one non-ASCII character ``run`` times in a row */
static int non_ascii_run(const Text *t, Py_ssize_t run)
{
    Py_ssize_t same = 0;
    for (Py_ssize_t i = 0; i < t->n; i++) {
        Py_UCS4 c = CH(t, i);
        same = (c >= 0x80 && i > 0 && c == CH(t, i - 1)) ? same + 1 : 1;
        if (c >= 0x80 && same >= run) {
            return 1;
        }
    }
    return 0;
}

/* The bits of phenotypes.value_flags_python (its V_* constants): the three screens of
 * phenotypes.value_screens_python, and what check_value reads besides (non-ASCII
 * characters, "think>", a closing run's tail). */
enum { V_GLUED = 1, V_WORDS = 2, V_LETTERS = 4, V_NON_ASCII = 8, V_THINK = 16, V_CLOSING = 32 };

/* the screens' numbers (phenotypes._VALUE_SCREEN_NUMBERS), checked once per call */
typedef struct {
    Py_ssize_t max_unit, repeats, max_words, copies, min_spaces, run;
} ValueNumbers;

static int value_numbers_ok(const ValueNumbers *v, const char *fn)
{
    if (v->max_unit < 1 || v->repeats < 1 || v->max_words < 1 || v->copies < 1 || v->run < 1) {
        PyErr_Format(PyExc_ValueError, "%s: units and copies must be >= 1", fn);
        return 0;
    }
    return 1;
}

/* V_GLUED | V_WORDS | V_LETTERS of one value (ascii: it holds no character above 127) */
static int screen_bits(const Text *t, int ascii, const ValueNumbers *v)
{
    int bits = glued_unit_run(t, v->max_unit, v->repeats) ? V_GLUED : 0;
    Py_ssize_t spaces = 0;
    for (Py_ssize_t i = 0; i < t->n && spaces < v->min_spaces; i++) {
        spaces += CH(t, i) == ' ';
    }
    if (spaces >= v->min_spaces && word_unit_run(t, v->max_words, v->copies)) {
        bits |= V_WORDS;
    }
    if (!ascii && non_ascii_run(t, v->run)) {
        bits |= V_LETTERS;
    }
    return bits;
}

/* "think>" occurs in the text (find_think_in_value's screen: every match ends so) */
static int has_think(const Text *t)
{
    static const char lit[] = "think>";
    for (Py_ssize_t i = 5; i < t->n; i++) {
        if (CH(t, i) != '>') {
            continue;
        }
        Py_ssize_t k = 0;
        while (k < 5 && CH(t, i - 5 + k) == (Py_UCS4)lit[k]) {
            k++;
        }
        if (k == 5) {
            return 1;
        }
    }
    return 0;
}

/* text.rstrip() is at least ``closing`` long and ends in that many copies of its last
 * character (phenotypes._closing_run's screen, at the shortest run it reports) */
static int closing_tail(const Text *t, Py_ssize_t closing)
{
    Py_ssize_t end = t->n;
    while (end > 0 && Py_UNICODE_ISSPACE(CH(t, end - 1))) {
        end--;
    }
    if (end < closing) {
        return 0;
    }
    const Py_UCS4 last = CH(t, end - 1);
    for (Py_ssize_t k = end - closing; k < end; k++) {
        if (CH(t, k) != last) {
            return 0;
        }
    }
    return 1;
}

static int all_ascii(const Text *t)
{
    for (Py_ssize_t i = 0; i < t->n; i++) {
        if (CH(t, i) > 127) {
            return 0;
        }
    }
    return 1;
}

/* The k-th (a, b) of spans (a PySequence_Fast), checked to lie in a text of n characters:
 * 1, or 0 with an exception set (``fn`` names the caller). */
static int span_at(PyObject *seq, Py_ssize_t k, Py_ssize_t n, const char *fn, Py_ssize_t *a,
                   Py_ssize_t *b)
{
    PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
        PyErr_Format(PyExc_TypeError, "%s: each span is a tuple (start, end)", fn);
        return 0;
    }
    *a = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 0));
    *b = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 1));
    if (PyErr_Occurred()) {
        return 0;
    }
    if (*a < 0 || *b < *a || *b > n) {
        PyErr_Format(PyExc_ValueError, "%s: a span outside the text", fn);
        return 0;
    }
    return 1;
}

PyDoc_STRVAR(value_flags_doc,
"value_flags(text, spans, max_unit, repeats, max_words, copies, min_spaces, run, closing)\n"
"    -> bytes\n\n"
"phenotypes.value_flags_python of text[a:b] for each (a, b) in spans, one byte a span: the\n"
"bits of phenotypes.value_screens_python (1 glued, 2 words, 4 letters), 8 a character above 127, 16 \"think>\"\n"
"occurs, 32 the value without its trailing whitespace ends in ``closing`` copies of one\n"
"character. One call screens a block's values (check_values).");

static PyObject *value_flags(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *text, *spans;
    ValueNumbers v;
    Py_ssize_t closing;
    if (!PyArg_ParseTuple(args, "UOnnnnnnn:value_flags", &text, &spans, &v.max_unit, &v.repeats,
                          &v.max_words, &v.copies, &v.min_spaces, &v.run, &closing)) {
        return NULL;
    }
    if (!value_numbers_ok(&v, "value_flags")) {
        return NULL;
    }
    if (closing < 1) {
        PyErr_SetString(PyExc_ValueError, "value_flags: closing must be >= 1");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(spans, "value_flags: spans must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    const Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *out = PyBytes_FromStringAndSize(NULL, count);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    char *bits = PyBytes_AS_STRING(out);
    const int kind = PyUnicode_KIND(text);
    const char *data = PyUnicode_DATA(text);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    const int ascii_text = PyUnicode_IS_ASCII(text);
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t a, b;
        if (!span_at(seq, k, n, "value_flags", &a, &b)) {
            goto fail;
        }
        const Text t = {kind, data + a * kind, b - a};
        const int ascii = ascii_text || all_ascii(&t);
        bits[k] = (char)(screen_bits(&t, ascii, &v) | (ascii ? 0 : V_NON_ASCII) |
                         (has_think(&t) ? V_THINK : 0) |
                         (closing_tail(&t, closing) ? V_CLOSING : 0));
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_DECREF(seq);
    Py_DECREF(out);
    return NULL;
}

/* ---- the word-piece soup screen (soup.py) -------------------------------------------------
 *
 * soup.find_soup splits a value at every " " and looks for SOUP_MIN_PIECES words in a row that
 * are soup.PIECES. soup_screen answers, for a block's values in one call, which is the first
 * that can hold such a run; the pieces come from soup.PIECES through set_pieces() at import. */

#define MAX_PIECES 128
#define MAX_PIECE_LEN 16
static Py_UCS4 PIECE[MAX_PIECES][MAX_PIECE_LEN];
static Py_ssize_t PIECE_LEN[MAX_PIECES];
static Py_ssize_t npieces = -1; /* -1: set_pieces() has not been called */
/* per length, the ASCII characters some piece of that length starts with, and ends with: a
 * word whose ends are in neither set (most words) is no piece, without a comparison */
static uint64_t PIECE_FIRST[MAX_PIECE_LEN + 1][2], PIECE_LAST[MAX_PIECE_LEN + 1][2];
static int piece_wide_ends = 0; /* some piece starts or ends above 127: no set rejects */

static inline int in_set(const uint64_t set[2], Py_UCS4 c)
{
    return piece_wide_ends || (c < 128 && ((set[c >> 6] >> (c & 63)) & 1));
}

PyDoc_STRVAR(set_pieces_doc,
"set_pieces(pieces) -> None\n\n"
"The words soup_screen() counts (soup.PIECES): a tuple of at most 128 str of 1 to 16\n"
"characters each.");

static PyObject *set_pieces(PyObject *Py_UNUSED(self), PyObject *arg)
{
    if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) > MAX_PIECES) {
        PyErr_SetString(PyExc_TypeError, "set_pieces: a tuple of at most 128 str");
        return NULL;
    }
    const Py_ssize_t count = PyTuple_GET_SIZE(arg);
    for (Py_ssize_t k = 0; k < count; k++) { /* all checked before any is kept */
        PyObject *piece = PyTuple_GET_ITEM(arg, k);
        if (!PyUnicode_Check(piece) || PyUnicode_GET_LENGTH(piece) < 1 ||
            PyUnicode_GET_LENGTH(piece) > MAX_PIECE_LEN) {
            PyErr_SetString(PyExc_TypeError, "set_pieces: each piece is a str of 1-16 characters");
            return NULL;
        }
    }
    memset(PIECE_FIRST, 0, sizeof PIECE_FIRST);
    memset(PIECE_LAST, 0, sizeof PIECE_LAST);
    int ascii_ends = 1;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *piece = PyTuple_GET_ITEM(arg, k);
        const Py_ssize_t len = PIECE_LEN[k] = PyUnicode_GET_LENGTH(piece);
        for (Py_ssize_t i = 0; i < len; i++) {
            PIECE[k][i] = PyUnicode_READ_CHAR(piece, i);
        }
        const Py_UCS4 a = PIECE[k][0], b = PIECE[k][len - 1];
        if (a >= 128 || b >= 128) {
            ascii_ends = 0;
            continue;
        }
        PIECE_FIRST[len][a >> 6] |= (uint64_t)1 << (a & 63);
        PIECE_LAST[len][b >> 6] |= (uint64_t)1 << (b & 63);
    }
    piece_wide_ends = !ascii_ends;
    npieces = count;
    Py_RETURN_NONE;
}

/* text[a:a+len] is one of the pieces */
static int is_piece(const Text *t, Py_ssize_t a, Py_ssize_t len)
{
    if (len < 1 || len > MAX_PIECE_LEN || !in_set(PIECE_FIRST[len], CH(t, a)) ||
        !in_set(PIECE_LAST[len], CH(t, a + len - 1))) {
        return 0;
    }
    for (Py_ssize_t k = 0; k < npieces; k++) {
        if (PIECE_LEN[k] != len) {
            continue;
        }
        Py_ssize_t i = 0;
        while (i < len && CH(t, a + i) == PIECE[k][i]) {
            i++;
        }
        if (i == len) {
            return 1;
        }
    }
    return 0;
}

/* soup.may_soup_python: longer than ``window`` (find_soup reads windows), or ``need`` words
 * of text.split(" ") in a row are pieces */
static int may_soup(const Text *t, Py_ssize_t need, Py_ssize_t window)
{
    if (t->n > window) {
        return 1;
    }
    Py_ssize_t run = 0, start = 0;
    for (Py_ssize_t i = 0; i <= t->n; i++) {
        if (i < t->n && CH(t, i) != ' ') {
            continue;
        }
        run = is_piece(t, start, i - start) ? run + 1 : 0;
        if (run >= need) {
            return 1;
        }
        start = i + 1;
    }
    return 0;
}

PyDoc_STRVAR(soup_screen_doc,
"soup_screen(text, spans, need, window) -> int\n\n"
"The index of the first (a, b) in spans for which soup.may_soup_python(text[a:b]) holds\n"
"(``need`` pieces in a row, values longer than ``window`` always), or len(spans).");

static PyObject *soup_screen(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *text, *spans;
    Py_ssize_t need, window;
    if (!PyArg_ParseTuple(args, "UOnn:soup_screen", &text, &spans, &need, &window)) {
        return NULL;
    }
    if (npieces < 0) {
        PyErr_SetString(PyExc_RuntimeError, "_textscan.set_pieces() has not been called");
        return NULL;
    }
    if (need < 1 || window < 0) {
        PyErr_SetString(PyExc_ValueError, "soup_screen: need >= 1 and window >= 0");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(spans, "soup_screen: spans must be a sequence");
    if (seq == NULL) {
        return NULL;
    }
    const Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    const int kind = PyUnicode_KIND(text);
    const char *data = PyUnicode_DATA(text);
    const Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    Py_ssize_t k = 0;
    for (; k < count; k++) {
        Py_ssize_t a, b;
        if (!span_at(seq, k, n, "soup_screen", &a, &b)) {
            goto fail;
        }
        const Text t = {kind, data + a * kind, b - a};
        if (may_soup(&t, need, window)) {
            break;
        }
    }
    Py_DECREF(seq);
    return PyLong_FromSsize_t(k);
fail:
    Py_DECREF(seq);
    return NULL;
}

/* ---- module functions ----------------------------------------------------------------------- */

static PyObject *positions(const Py_ssize_t *v, Py_ssize_t count)
{
    PyObject *out = PyTuple_New(count);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *x = PyLong_FromSsize_t(v[k]);
        if (x == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, k, x);
    }
    return out;
}

/* scan()'s answer once the character passes have run (mix: NULL when no mix was found): the
 * loops found, and every result as a tuple. */
static PyObject *scan_finish(const Text *t, const Leaks *leaks, const Mix *mix, Py_ssize_t limit)
{
    Loop loops[MAX_LOOPS];
    Py_ssize_t nloops = find_loops(t, limit, loops);

    PyObject *control = positions(leaks->control, leaks->ncontrol);
    PyObject *replacement = positions(leaks->replacement, leaks->nreplacement);
    PyObject *moji = PyTuple_New(leaks->nmoji);
    PyObject *loop_list = PyTuple_New(nloops);
    PyObject *mix_obj = mix ? Py_BuildValue("(nny#)", mix->start, mix->end, mix->groups,
                                            mix->ngroups)
                            : Py_NewRef(Py_None);
    if (!control || !replacement || !moji || !loop_list || !mix_obj) {
        goto fail;
    }
    for (Py_ssize_t k = 0; k < leaks->nmoji; k++) {
        PyObject *span = Py_BuildValue("(nn)", leaks->moji_start[k], leaks->moji_end[k]);
        if (span == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(moji, k, span);
    }
    for (Py_ssize_t k = 0; k < nloops; k++) {
        PyObject *lp = Py_BuildValue("(nnnn)", loops[k].start, loops[k].end, loops[k].period,
                                     loops[k].repeats);
        if (lp == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(loop_list, k, lp);
    }
    return Py_BuildValue("(NNNNON)", control, replacement, moji, mix_obj,
                         leaks->salad ? Py_True : Py_False, loop_list);
fail:
    Py_XDECREF(control);
    Py_XDECREF(replacement);
    Py_XDECREF(moji);
    Py_XDECREF(loop_list);
    Py_XDECREF(mix_obj);
    return NULL;
}

PyDoc_STRVAR(scan_doc,
"scan(text, loops=3) -> (control, replacement, mojibake, script_mix, salad, loops)\n\n"
"control, replacement: up to 8 offsets each; mojibake: up to 8 (start, end) spans;\n"
"script_mix: None or (start, end, group letters as bytes); salad: whether the salad screen\n"
"passes; loops: up to ``loops`` (start, end, period, repeats). See textcheck.check_text.");

static PyObject *scan(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"text", "loops", NULL};
    PyObject *text;
    Py_ssize_t limit = 3;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "U|n:scan", names, &text, &limit)) {
        return NULL;
    }
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "_textscan.configure() has not been called");
        return NULL;
    }
    if (limit > MAX_LOOPS) {
        limit = MAX_LOOPS;
    }
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    Leaks leaks;
    Mix mix_state;
    /* ASCII text has one script group: no switch between groups is possible */
    int ascii = PyUnicode_IS_ASCII(text);
    char_passes(&t, ascii ? PASS_LEAKS : PASS_LEAKS | PASS_MIX, &leaks, &mix_state, NULL, NULL);
    int mix = !ascii && mix_state.done && mix_state.ngroups > 0;
    return scan_finish(&t, &leaks, mix ? &mix_state : NULL, limit);
}

/* ---- scan() and prose_screens() fused (reasoning: both read it whole) ----------------------
 *
 * A grade runs scan() and prose_screens() over the same reasoning, which is most of a clean
 * sample's text, and tokens.scan looks there for "<" and "DSML"; scan_prose() runs all of
 * their character passes in one char_passes loop and answers exactly (scan(text),
 * prose_screens(text, ...), "<" in text or "DSML" in text). No rule is written here: the
 * passes and the finishing steps are those of the two functions. */

PyDoc_STRVAR(scan_prose_doc,
"scan_prose(text, need, ngram, probe, screen_max, needles, end=len(text))\n"
"    -> (scan, screens, tagged)\n\n"
"(scan(text), prose_screens(text, need, ngram, probe, screen_max, needles), '<' in text or\n"
"'DSML' in text) in one pass over the text: the reasoning's text checks, prose screens and\n"
"tag screen (phenotypes.reasoning_passes); of text[:end] where end is given.");

static PyObject *scan_prose(PyObject *Py_UNUSED(self), PyObject *args)
{
    PyObject *text, *needles;
    Py_ssize_t need, ngram, probe, screen_max, end = PY_SSIZE_T_MAX; /* default: the whole */
    if (!PyArg_ParseTuple(args, "UnnnnO!|n:scan_prose", &text, &need, &ngram, &probe,
                          &screen_max, &PyTuple_Type, &needles, &end)) {
        return NULL;
    }
    if (!configured) {
        PyErr_SetString(PyExc_RuntimeError, "_textscan.configure() has not been called");
        return NULL;
    }
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    if (end == PY_SSIZE_T_MAX) {
        end = t.n;
    }
    if (end < 0 || end > t.n) {
        PyErr_SetString(PyExc_ValueError, "scan_prose: end outside the text");
        return NULL;
    }
    /* text[:end], read in place (reasoning is the head of a grade's text: no copy of it). An
     * ASCII text has ASCII heads; a head of a wider text may be ASCII too, and reading it as
     * not ASCII answers the same: ASCII letters are one script group, and glue no seam. */
    int ascii = PyUnicode_IS_ASCII(text);
    t.n = end;
    Prose p;
    if (!prose_init(&p, &t, ascii, need, ngram, probe, screen_max, needles)) {
        return NULL;
    }
    Leaks leaks;
    Mix mix;
    int tagged;
    char_passes(&t, PASS_LEAKS | PASS_MIX | PASS_PROSE | PASS_TAGS, &leaks, &mix, &p, &tagged);
    PyObject *screens = prose_finish(&p, &t, ascii); /* frees the joined buffer */
    /* ASCII text has one script group: scan() runs no switch pass there */
    int mixed = !ascii && mix.done && mix.ngroups > 0;
    PyObject *found = screens ? scan_finish(&t, &leaks, mixed ? &mix : NULL, 3) : NULL;
    if (found == NULL) {
        Py_XDECREF(screens);
        return NULL;
    }
    return Py_BuildValue("(NNO)", found, screens, tagged ? Py_True : Py_False);
}

PyDoc_STRVAR(configure_doc,
"configure(**thresholds) -> None\n\n"
"Set every threshold scan() uses (all keywords required; textcheck.py passes the values of\n"
"exporter/dsml/thresholds.py). ValueError names a value out of range.");

static PyObject *configure(PyObject *Py_UNUSED(self), PyObject *args, PyObject *kwargs)
{
    static char *names[] = {
        "probe", "stride", "max_period", "far_every", "tries",
        "min_letters", "repeats_short", "repeats_medium", "repeats_long", "repeats_few",
        "short_unit", "long_unit", "min_loop_chars",
        "script_min_groups", "script_min_switches", "script_span", "script_max_switches",
        "salad_min_run", NULL};
    Limits v;
    if (!PyArg_ParseTupleAndKeywords(
            args, kwargs, "|$nnnnnnnnnnnnnnnnnn:configure", names, &v.probe, &v.stride,
            &v.max_period, &v.far_every, &v.tries, &v.min_letters, &v.repeats_short,
            &v.repeats_medium, &v.repeats_long, &v.repeats_few, &v.short_unit, &v.long_unit,
            &v.min_loop_chars, &v.script_min_groups, &v.script_min_switches, &v.script_span,
            &v.script_max_switches, &v.salad_min_run)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(args) != 0 || kwargs == NULL ||
        PyDict_GET_SIZE(kwargs) != (Py_ssize_t)(sizeof names / sizeof names[0] - 1)) {
        PyErr_SetString(PyExc_TypeError, "configure() takes every threshold, by keyword");
        return NULL;
    }
    const char *bad = NULL;
    if (v.probe < 1) bad = "probe";
    else if (v.stride < 1) bad = "stride";
    else if (v.far_every < 1) bad = "far_every";
    else if (v.tries < 1) bad = "tries";
    else if (v.max_period < 1 || v.long_unit < 1) bad = "max_period/long_unit";
    else if (v.min_letters < 1 || v.min_letters > MAX_LETTERS) bad = "min_letters (1-16)";
    else if (v.script_min_switches < 1 || v.script_min_switches > MAX_SWITCHES)
        bad = "script_min_switches (1-64)";
    else if (v.salad_min_run < 1) bad = "salad_min_run";
    else if (v.min_loop_chars < v.probe) bad = "min_loop_chars";
    if (bad != NULL) {
        PyErr_Format(PyExc_ValueError, "_textscan.configure: %s out of range", bad);
        return NULL;
    }
    L = v;
    configured = 1;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_VARARGS | METH_KEYWORDS, scan_doc},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     configure_doc},
    {"canonical_calls", canonical_calls, METH_VARARGS, canonical_doc},
    {"may_glue", may_glue, METH_O, may_glue_doc},
    {"prose_screens", prose_screens, METH_VARARGS, prose_screens_doc},
    {"value_flags", value_flags, METH_VARARGS, value_flags_doc},
    {"set_pieces", set_pieces, METH_O, set_pieces_doc},
    {"soup_screen", soup_screen, METH_VARARGS, soup_screen_doc},
    {"scan_prose", scan_prose, METH_VARARGS, scan_prose_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "exporter.dsml._textscan",
    "The detection core of exporter.dsml.textcheck in C (see textcheck.check_text_python).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__textscan(void)
{
    build_tables();
    build_prose_table();
    build_seam_table();
    build_fused_table();
    return PyModule_Create(&module);
}
