"""Every number the text heuristics use, in one place, with why it has the value it has.

The principle: degeneration under load runs long (loops and salads continue for hundreds of
tokens, often until max_tokens), while normal text in many languages, code, JSON, diffs and
shell commands has short bursts of the same shapes. So each threshold sits well above what the
false-positive corpus (``tests/dsml/fp_corpus.py``) produces and well below what the degenerate
corpus contains; ``docs/dsml-grading.md`` gives the table.
"""

from __future__ import annotations

# --- ngram_loop: an exact unit repeated back to back -------------------------------------------
LOOP_STRIDE = 128
"""A probe starts every 128 characters: a loop is found for sure once it runs one stride past
its minimum length, at a cost of one bounded ``str.find`` per 128 characters."""
LOOP_PROBE = 12
"""Probe length: long enough that a recurrence within one period is rare in prose."""
LOOP_MAX_PERIOD = 1024
"""Longest unit looked for (a repeated paragraph); longer repeats are not loops we can see."""
LOOP_FAR_EVERY = 4
"""Periods over LOOP_LONG_UNIT are searched from every 4th anchor only (a loop of such units is
at least 4 x 256 characters long, so an anchor every 512 characters still lands in it)."""
LOOP_TRIES = 3
"""Recurrences of one probe tried as candidate periods before moving to the next anchor."""
LOOP_MIN_LETTERS = 3
"""A unit needs 3 distinct letters to count at the normal thresholds: runs of digits,
separators, indentation, table rules and ``0, 0, 0`` data are never loops."""
LOOP_REPEATS_SHORT = 16
"""Units under 16 characters ("the ", "ok. ") must repeat 16 times: code repeats short lines a
few times, lists repeat short cells, never 16 identical ones back to back."""
LOOP_REPEATS_MEDIUM = 6
"""Units of 16-255 characters (a sentence, a line, a tag) must repeat 6 times."""
LOOP_REPEATS_LONG = 4
"""Units of 256+ characters (a paragraph) must repeat 4 times (1 KiB of exact repetition)."""
LOOP_SHORT_UNIT = 16
LOOP_LONG_UNIT = 256
LOOP_REPEATS_FEW_LETTERS = 64
"""Units with only 1-2 distinct letters ("ha", "的", "a") need 64 repeats: laughter and
emphasis repeat a syllable a dozen times, a stuck decoder hundreds of times."""

# --- symbol_salad: punctuation with no words ----------------------------------------------------
SALAD_MIN_RUN = 24
"""Non-space characters in a run with no letter or digit (whitespace allowed inside)."""
SALAD_MIN_SHARE = 0.6
"""Share of the run that is sentence punctuation (ASCII ,.;:!? or any Unicode P* outside
ASCII): table rules (|---|), banners (*****), box drawing and emoji are not punctuation."""
SALAD_MIN_DISTINCT = 3
"""Distinct punctuation characters in the run: a row of one character ("!!!!", "....") is
emphasis or a leader line; salad mixes kinds."""
SALAD_LONG_NONASCII = 32
"""...or 32 non-ASCII punctuation characters even of one kind (an em-dash or 。 flood): prose
uses at most a pair (——, ……)."""

# --- script_mix: words of several scripts switching inside a sentence --------------------------
SCRIPT_MIN_GROUPS = 3
"""Distinct script groups among the switches: bilingual text (Chinese or Russian with English
terms, Japanese kana with kanji) has two; salad has three or more."""
SCRIPT_MIN_SWITCHES = 8
"""Consecutive script switches between words joined only by spaces (or nothing). Translation
lists and glossaries separate scripts with punctuation (":", "-", "|", quotes, newlines), and
one-letter words (math variables, initials) do not count, so neither produces switches."""
SCRIPT_SPAN = 160
"""...within this many characters (about 24 words) and with no sentence end in between."""
SCRIPT_MAX_SWITCHES = 100_000
"""Switch points examined per channel (each costs Python time), so a 10 MB input stays fast."""

# --- token_soup: bare word pieces strung together ---------------------------------------------
SOUP_MIN_PIECES = 6
"""Space-separated sub-word pieces (``ation``, ``ness``, ``ous``...) in a row: a list of suffixes
in a linguistics answer separates them with commas or hyphens; six bare ones in a row is a
decoder sampling continuation tokens."""

# --- character-level leaks ----------------------------------------------------------------------
MOJIBAKE_MIN_HITS = 2
"""Byte-level BPE or double-encoded UTF-8 sequences per channel: one could be a quoted example,
a leak repeats at every multi-byte character or space."""
CONTROL_MIN = 1
"""C0/C1 control characters (not tab, newline, carriage return, form feed, ESC-[): the
detokenizer never produces one from a healthy generation."""
REPLACEMENT_MIN = 1
"""U+FFFD characters: soft, because a model may echo one from a tool result."""

# --- size --------------------------------------------------------------------------------------
DEFAULT_MAX_CHARS = 1 << 20
"""Characters kept per stream by the streaming grader (half head, half tail) before grading
becomes head + tail with reason ``oversized``; 1 Mi characters is far above any tool call."""

# --- phenotypes checked once per sample (exporter/dsml/phenotypes.py) ----------------------------
PROSE_LOOP_NGRAM = 6
"""Words per shingle when looking for a passage repeated verbatim in long prose."""
PROSE_LOOP_COPIES = 3
"""Back-to-back verbatim copies of one passage (word level, any period): a quoted passage or a
refrain occurs twice; a decoder stuck in a loop writes it again and again until max_tokens."""
PROSE_LOOP_MIN_WORDS = 80
"""Words the copies after the first must hold together: choruses and repeated short log lines
stay below; the loops reported on long generations (sglang#33397) run for hundreds of tokens."""
PROSE_LOOP_MIN_DISTINCT = 5
"""Distinct lettered words the repeated passage needs: rows of numbers, rules, `0 0 0` data and
indentation are never a prose loop (the char-level ``ngram_loop`` has its own rules for them)."""
VALUE_LOOP_CHAR_REPEATS = 16
"""One non-ASCII character repeated this often, glued to the word before it, inside one
tool-call value: ``README.md的的的...``, ``Paris——————...``."""
VALUE_LOOP_ASCII_RUN = 80
"""One ASCII symbol (not a letter, digit, ``_`` or ``.``) repeated this often glued to a word:
``Paris`` + 150 dashes. Longer than a banner line: comment banners glued to a word
(``------/cancell------`` in the stdlib's decimal test data, 58 dashes) are code."""
VALUE_CLOSING_PUNCT_RUN = 16
"""One non-ASCII punctuation character (Unicode P*: an em-dash, ``。``, ``…``) repeated this
often alone on a value's last line, nothing after it, is ``value_loop`` at any width: code,
then 27 em-dashes (issue 32's last vLLM miss; the glued rule needs a word before the run, the
closing rule below 80 symbols and twice the text's width). Anywhere in text 32 of them are
already ``symbol_salad`` (SALAD_LONG_NONASCII); closing the value is the evidence that halves
it. Clean text uses such runs as rules between sections, with text after them (Chinese web
text's 16 em-dashes before a copyright notice, a 70 em-dash rule in OpenJDK's copyright file):
the 39,000 text files of this machine (docs, man pages in 30 locales, message catalogs, Python
sources) hold no line of 8+ repeated non-ASCII punctuation that closes its file. Box drawing
(``────``, ``━━━``) and ASCII rules are not punctuation: they keep the 80."""
VALUE_LOOP_UNIT_REPEATS = 8
"""A unit of 2-8 characters repeated this often glued to the word before it inside one value:
``Crash on startupabcabcabc...``. Laughter (``Ahahaha``) and emphasis stay below."""
VALUE_LOOP_MAX_UNIT = 8
VALUE_SALAD_MIN_SWITCHES = 5
"""Script switches between space-joined words inside one tool-call value, among at least
SCRIPT_MIN_GROUPS groups: a value is short, so the salad confined to it is shorter than
``script_mix``'s 8 switches."""
VALUE_SALAD_MANY_GROUPS = 4
"""...or one switch fewer when the chain spans this many script groups: ``data данные 数据
بيانات δεδομένα`` (issue 32). Bilingual text has two groups; a trilingual label three."""
GLUED_MIN_LETTERS = 4
"""Letters of an alphabetic script on each side of a script change inside one word (no space,
no punctuation): ``returnданных``; 4, because Russian case endings glued to English names
(``Pythonом``, ``Dockerами``) have 2-3. Latin glued to CJK, kana or Hangul is normal
(``使用Python``, ``API를``) and never counts; a CJK side needs one character."""
CUT_MIN_CHARS = 12
"""A prose answer under ``stop`` with tools offered and no call is counted as unterminated
(``cut_under_stop``, a signal) only when it holds at least this many characters: a one-word
reply is an answer, not a cut."""
DUPLICATE_MIN_COPIES = 3
"""The same call (tool and arguments) this many times back to back in one response is
``duplicate_call`` (soft): a loop over the invoke. Twice is only counted (``repeated_call``):
agents poll, retry and fan out, and both calls reach the client intact (issue 32)."""
PHRASE_LOOP_COPIES = 3
"""One sentence written this many times back to back (nothing but whitespace between) in the
prose of a content channel is ``phrase_loop``: ``I will call the tool now.`` x3 before a valid
block (issue 32), far below ``ngram_loop``'s repeats and ``prose_loop``'s 80 words. A quotation
is said twice at most; a chorus is rarely a whole sentence three times over."""
PHRASE_LOOP_MIN_CHARS = 12
"""The sentence must be this wide (a CJK character counts two), letters among them:
``No. No. No.`` and ``OK. OK. OK.`` are emphasis, not a loop."""
VALUE_WORD_LOOP_REPEATS = 8
"""One to three words (letters only, at least ``LOOP_MIN_LETTERS`` distinct) repeated this often
back to back, single spaces between, inside one tool-call value: ``the the the ...``,
``error log error log ...`` (issue 32); below ``ngram_loop``'s 16 repeats for short units."""
