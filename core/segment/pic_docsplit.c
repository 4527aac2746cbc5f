/*
 * pic_docsplit.c — document boundaries in unmarked text (see pic_docsplit.h).
 */
#include <stdlib.h>
#include <string.h>

#include "pic_buf.h"
#include "pic_docsplit.h"

/* Words that name a document in a label ("Document [3]", "Source: …"). */
static const char *const pic_docsplit_words[] = {
    "document", "doc", "source", "passage", "context", "chunk", "result", "reference",
    "snippet", "excerpt", "article", "file", "page", "citation", "title", "url", NULL,
};

/* Tag names that wrap a document ("<document>", "<doc id=7>", "</source>"). */
static const char *const pic_docsplit_tags[] = {
    "document", "doc", "source", "passage", "context", "chunk", "result", "search_result",
    "snippet", "excerpt", "article", "file", "page", "reference", "item", "record", NULL,
};

static int
pic_docsplit_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int
pic_docsplit_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int
pic_docsplit_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* 1 if p[0..n) is one of list, ASCII case-insensitively. */
static int
pic_docsplit_in(const char *const *list, const char *p, size_t n)
{
    for (size_t k = 0; list[k] != NULL; k++) {
        size_t j = 0;

        if (strlen(list[k]) != n) {
            continue;
        }
        while (j < n && (p[j] | 0x20) == list[k][j]) {
            j++;
        }
        if (j == n) {
            return 1;
        }
    }
    return 0;
}

/* A label at the start of line p[0..n): its length (0: none), *numbered
 * set when it holds a number, *colon when it ends in ':'. */
static size_t
pic_docsplit_label(const char *p, size_t n, int *numbered, int *colon)
{
    size_t i = 0, w;

    *numbered = 0;
    *colon = 0;
    if (n > 0 && p[0] == '[') {                         /* "[3]" */
        for (i = 1; i < n && pic_docsplit_digit(p[i]); i++) {
        }
        if (i == 1 || i >= n || p[i] != ']') {
            return 0;
        }
        *numbered = 1;
        i++;
    } else {                                            /* "Document [3]:" */
        while (i < n && pic_docsplit_alpha(p[i])) {
            i++;
        }
        w = i;
        if (w == 0 || !pic_docsplit_in(pic_docsplit_words, p, w)) {
            return 0;
        }
        while (i < n && p[i] == ' ') {
            i++;
        }
        if (i < n && (p[i] == '[' || p[i] == '#' || p[i] == '(')) {
            char   close = p[i] == '[' ? ']' : p[i] == '(' ? ')' : 0;
            size_t d = ++i;

            while (i < n && pic_docsplit_digit(p[i])) {
                i++;
            }
            if (i == d || (close && (i >= n || p[i] != close))) {
                return 0;
            }
            i += close != 0;
            *numbered = 1;
        } else if (i < n && pic_docsplit_digit(p[i])) {
            while (i < n && pic_docsplit_digit(p[i])) {
                i++;
            }
            *numbered = 1;
        } else {
            i = w;
        }
    }
    if (i < n && p[i] == ':') {
        *colon = 1;
        i++;
    }
    return *numbered || *colon ? i : 0;
}

/* A tag at the start of p[0..n) whose name is a document tag: its length
 * through '>' (0: none); *closing set for "</name>". */
static size_t
pic_docsplit_tag(const char *p, size_t n, int *closing)
{
    size_t i = 1, s;

    *closing = 0;
    if (n < 3 || p[0] != '<') {
        return 0;
    }
    if (p[1] == '/') {
        *closing = 1;
        i = 2;
    }
    s = i;
    while (i < n && (pic_docsplit_alpha(p[i]) || p[i] == '_')) {
        i++;
    }
    if (i == s || !pic_docsplit_in(pic_docsplit_tags, p + s, i - s)) {
        return 0;
    }
    if (!*closing && i < n && p[i] == ' ') {
        while (i < n && p[i] != '>' && p[i] != '<' && p[i] != '\n') {
            i++;
        }
    }
    if (i < n && p[i] == '/' && !*closing) {
        i++;
    }
    return i < n && p[i] == '>' ? i + 1 : 0;
}

/* 1 if line p[0..len) ends in a closing document tag after some text
 * ("text</document>"). */
static int
pic_docsplit_closes(const char *p, size_t len)
{
    size_t j;
    int    closing;

    if (len <= 3 || p[len - 1] != '>') {
        return 0;
    }
    for (j = len - 1; j > 0 && !(p[j - 1] == '<' && p[j] == '/'); j--) {
    }
    return j > 1 && pic_docsplit_tag(p + j - 1, len - j + 1, &closing) == len - j + 1
           && closing;
}

/* 1 if p[0..n) is one line of at most PIC_DOCSPLIT_HEADER_MAX bytes
 * before its trailing blank lines ("You are agent 2.\n\n"): a paragraph
 * that short is a header of its own, whatever its form. */
static int
pic_docsplit_one_line(const char *p, size_t n)
{
    while (n > 0 && (pic_docsplit_space(p[n - 1]) || p[n - 1] == '\n')) {
        n--;
    }
    return n > 0 && n <= PIC_DOCSPLIT_HEADER_MAX && memchr(p, '\n', n) == NULL;
}

/* Appends cut c (kept ascending and in (0, n)) to the list. */
static void
pic_docsplit_add(size_t c, size_t n, size_t *cuts, size_t cap, size_t *k, size_t *last)
{
    if (c == 0 || c >= n || (*k > 0 && c <= *last)) {
        return;
    }
    if (*k < cap) {
        cuts[*k] = c;
    }
    (*k)++;
    *last = c;
}

/* Cuts before the top-level items of the JSON array data[0..n) (whose
 * first non-space byte is '['); returns their count as pic_docsplit_cuts. */
static size_t
pic_docsplit_json(const char *data, size_t n, size_t *cuts, size_t cap)
{
    size_t k = 0, last = 0, i = 0;
    int    depth = 0, str = 0, want = 0;

    for (; i < n; i++) {
        char c = data[i];

        if (want && !pic_docsplit_space(c) && c != '\n') {
            if (c != ']') {
                pic_docsplit_add(i, n, cuts, cap, &k, &last);
            }
            want = 0;
        }
        if (str) {
            if (c == '\\') {
                i++;
            } else if (c == '"') {
                str = 0;
            }
            continue;
        }
        switch (c) {
        case '"': str = 1; break;
        case '[': case '{': want = ++depth == 1; break;
        case ']': case '}': depth--; break;
        case ',': want = depth == 1; break;
        default: break;
        }
    }
    /* one item is no list of documents */
    return k >= 2 ? k : 0;
}

size_t
pic_docsplit_cuts(const char *data, size_t n, size_t soft_min, size_t *cuts, size_t cap)
{
    size_t k = 0, last = 0, ls = 0, i;
    int    blank_run = 0;

    for (i = 0; i < n && (pic_docsplit_space(data[i]) || data[i] == '\n'); i++) {
    }
    if (i < n && data[i] == '[') {
        size_t kj = pic_docsplit_json(data, n, cuts, cap);

        if (kj > 0) {
            return kj;
        }
    }
    while (ls < n) {
        const char *nl = memchr(data + ls, '\n', n - ls);
        size_t      le = nl ? (size_t) (nl - data) : n;     /* line [ls, le) */
        size_t      next = nl ? le + 1 : n;
        size_t      te = le, lab, tag;
        int         numbered, colon, closing;

        while (te > ls && pic_docsplit_space(data[te - 1])) {
            te--;
        }
        if (te == ls) {                                 /* blank line */
            blank_run = 1;
            ls = next;
            continue;
        }

        if (blank_run
            && (ls - last >= soft_min || pic_docsplit_one_line(data + last, ls - last)))
        {
            pic_docsplit_add(ls, n, cuts, cap, &k, &last);
        }
        blank_run = 0;
        const char *p = data + ls;
        size_t      len = te - ls;

        if (len <= PIC_DOCSPLIT_HEADER_MAX && p[0] == '#') {    /* markdown heading */
            size_t h = 0;

            while (h < len && p[h] == '#') {
                h++;
            }
            if (h <= 6 && h < len && p[h] == ' ') {
                pic_docsplit_add(ls, n, cuts, cap, &k, &last);
                pic_docsplit_add(next, n, cuts, cap, &k, &last);
                ls = next;
                continue;
            }
        }
        tag = pic_docsplit_tag(p, len, &closing);
        if (tag > 0) {
            if (closing) {
                /* the tag stays with the body it closes */
                pic_docsplit_add(next, n, cuts, cap, &k, &last);
            } else {
                pic_docsplit_add(ls, n, cuts, cap, &k, &last);
                pic_docsplit_add(tag == len ? next : ls + tag, n, cuts, cap, &k, &last);
                if (tag < len && pic_docsplit_closes(p + tag, len - tag)) {
                    pic_docsplit_add(next, n, cuts, cap, &k, &last);
                }
            }
            ls = next;
            continue;
        }
        if (pic_docsplit_closes(p, len)) {
            /* "text</document>": the line closes a document */
            pic_docsplit_add(next, n, cuts, cap, &k, &last);
            ls = next;
            continue;
        }
        lab = pic_docsplit_label(p, len, &numbered, &colon);
        if (lab > 0 && len <= PIC_DOCSPLIT_HEADER_MAX
            && (lab == len || (colon && !numbered)))
        {                                               /* a header line */
            pic_docsplit_add(ls, n, cuts, cap, &k, &last);
            pic_docsplit_add(next, n, cuts, cap, &k, &last);
        } else if (lab > 0 && numbered && lab < len && p[lab] == ' ') {
            pic_docsplit_add(ls, n, cuts, cap, &k, &last);     /* "[3] text" */
            pic_docsplit_add(ls + lab, n, cuts, cap, &k, &last);
        }
        ls = next;
    }
    return k;
}

static int
pic_docsplit_splits(pic_region_kind k)
{
    return k == PIC_REGION_SYSTEM || k == PIC_REGION_USER || k == PIC_REGION_TOOL_RESULT
           || k == PIC_REGION_PROMPT;
}

int
pic_docsplit_render(pic_render *r, size_t soft_min)
{
    pic_region *out = NULL;
    size_t      n_out = 0, cap_out = 0, *cuts = NULL, cap_cuts = 0;

    for (size_t i = 0; i < r->n_regions; i++) {
        const pic_region *g = &r->regions[i];
        size_t            nc = 0, len = g->end - g->start, at = g->start;

        if (pic_docsplit_splits(g->kind)) {
            nc = pic_docsplit_cuts(r->text.data + g->start, len, soft_min, cuts, cap_cuts);
            if (nc > cap_cuts) {
                if (pic_grow((void **) &cuts, &cap_cuts, nc, sizeof(*cuts)) != 0) {
                    goto oom;
                }
                nc = pic_docsplit_cuts(r->text.data + g->start, len, soft_min, cuts,
                                       cap_cuts);
            }
        }
        if (pic_grow((void **) &out, &cap_out, n_out + nc + 1, sizeof(*out)) != 0) {
            goto oom;
        }
        for (size_t c = 0; c <= nc; c++) {
            size_t end = c < nc ? g->start + cuts[c] : g->end;

            out[n_out] = *g;
            out[n_out].start = at;
            out[n_out].end = end;
            n_out++;
            at = end;
        }
    }
    /* documents of a message numbered from 0 in order; the parts of a tool
     * result keep their number: an agent loop's newest result is in the
     * next turn's exact prefix, so building its parts' entries (what a
     * document is declared for) would be work no request uses */
    for (size_t i = 0, prev = SIZE_MAX; i < n_out; i++) {
        if (out[i].kind == PIC_REGION_GLUE || out[i].kind == PIC_REGION_TOOL_RESULT) {
            continue;
        }
        if (prev != SIZE_MAX && out[prev].kind == out[i].kind
            && out[prev].index == out[i].index) {
            out[i].doc = out[prev].doc + 1;
        } else {
            out[i].doc = 0;
        }
        prev = i;
    }
    free(cuts);
    free(r->regions);
    r->regions = out;
    r->n_regions = n_out;
    r->cap_regions = cap_out;
    return 0;

oom:
    free(cuts);
    free(out);
    return -1;
}
