const STAR = 0x2a;
const QUESTION = 0x3f;
const OPEN = 0x5b;
const CLOSE = 0x5d;
const CARET = 0x5e;
const DASH = 0x2d;
const BACKSLASH = 0x5c;

/** How deep `*`s may nest before a pattern counts as abusive and matches nothing, as in Redis. */
const MAX_NESTING = 1000;

/**
 * A test of names against the glob `pattern`, as Redis's SCAN MATCH decides a match (stringmatchlen in
 * util.c): `*`, `?`, `[abc]`, `[^a-z]` (a reversed range counts too), backslash escapes, an
 * unclosed `[` as a class running to the end. Both are compared as UTF-8 bytes, as Redis compares
 * them, so `?` is one byte.
 */
export function globMatcher(pattern: string): (name: string) => boolean {
  const bytes = signed(pattern);
  return (name) => match(bytes, 0, signed(name), 0, { skipLonger: false }, 0);
}

/** The UTF-8 bytes of `text` as C's signed `char`, which decides ranges over non-ASCII bytes in Redis. */
function signed(text: string): Int8Array {
  const bytes = Buffer.from(text);
  return new Int8Array(bytes.buffer, bytes.byteOffset, bytes.length);
}

/** The class at `from` (just past its `[`) against byte `c`: whether it matches, and where the class ends. */
function matchClass(pattern: Int8Array, from: number, c: number): { matched: boolean; end: number } {
  let p = from;
  const not = pattern[p] === CARET;
  if (not) p++;
  let matched = false;
  for (;;) {
    if (pattern[p] === BACKSLASH && pattern.length - p >= 2) {
      p++;
      if (pattern[p] === c) matched = true;
    } else if (pattern[p] === CLOSE) {
      break;
    } else if (p >= pattern.length) {
      p--;
      break;
    } else if (pattern.length - p >= 3 && pattern[p + 1] === DASH) {
      const a = pattern[p] as number;
      const b = pattern[p + 2] as number;
      if (c >= Math.min(a, b) && c <= Math.max(a, b)) matched = true;
      p += 2;
    } else if (pattern[p] === c) {
      matched = true;
    }
    p++;
  }
  return { matched: not ? !matched : matched, end: p };
}

function match(
  pattern: Int8Array,
  from: number,
  name: Int8Array,
  at: number,
  state: { skipLonger: boolean },
  nesting: number,
): boolean {
  if (nesting > MAX_NESTING) return false;
  let p = from;
  let s = at;
  while (p < pattern.length && s < name.length) {
    const c = pattern[p] as number;
    if (c === STAR) {
      while (pattern[p + 1] === STAR) p++;
      if (p === pattern.length - 1) return true;
      for (; s < name.length; s++) {
        if (match(pattern, p + 1, name, s, state, nesting + 1)) return true;
        // The rest matched nowhere after a later star: a longer match for this one cannot help.
        if (state.skipLonger) return false;
      }
      state.skipLonger = true;
      return false;
    }
    if (c === OPEN) {
      const { matched, end } = matchClass(pattern, p + 1, name[s] as number);
      if (!matched) return false;
      p = end;
    } else if (c !== QUESTION) {
      if (c === BACKSLASH && pattern.length - p >= 2) p++;
      if (pattern[p] !== name[s]) return false;
    }
    p++;
    s++;
    if (s === name.length) {
      while (pattern[p] === STAR) p++;
      break;
    }
  }
  return p >= pattern.length && s === name.length;
}
