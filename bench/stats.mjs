/** Median of a list of numbers (null entries, from runs that could not measure, are skipped). */
export function median(values) {
  const known = values.filter((v) => typeof v === 'number' && Number.isFinite(v));
  if (known.length === 0) return null;
  return percentile(known, 50);
}

/** The p-th percentile (0–100) with linear interpolation between closest ranks. */
export function percentile(values, p) {
  if (values.length === 0) return null;
  const sorted = Float64Array.from(values).sort();
  const rank = (p / 100) * (sorted.length - 1);
  const low = Math.floor(rank);
  const high = Math.ceil(rank);
  return sorted[low] + (sorted[high] - sorted[low]) * (rank - low);
}

/**
 * Samples of a latency in ms, kept in a growable typed array so that recording one costs no
 * allocation in the measured loop (a plain array of doubles would box and reallocate).
 */
export class Samples {
  #values = new Float64Array(1024);
  #length = 0;

  add(value) {
    if (this.#length === this.#values.length) {
      const bigger = new Float64Array(this.#values.length * 2);
      bigger.set(this.#values);
      this.#values = bigger;
    }
    this.#values[this.#length++] = value;
  }

  get length() {
    return this.#length;
  }

  percentile(p) {
    if (this.#length === 0) return null;
    return percentile(this.#values.subarray(0, this.#length), p);
  }

  max() {
    let max = null;
    for (let i = 0; i < this.#length; i++) if (max === null || this.#values[i] > max) max = this.#values[i];
    return max;
  }
}
