import { DEFAULTS, type WhenUnavailable } from './defaults.js';
import { invalidArgument } from './errors.js';

/** Validation at the edge: each check names the option and shows the value it got. */

function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value);
  if (typeof value === 'bigint') return `${value}n`;
  if (value === null) return 'null';
  if (typeof value === 'object') return Object.prototype.toString.call(value);
  if (typeof value === 'function') return 'a function';
  return String(value);
}

export function lockName(name: unknown, what = 'lock name'): string {
  if (typeof name !== 'string') throw invalidArgument(`${what} must be a string, got ${show(name)}`);
  if (name.length === 0) throw invalidArgument(`${what} must not be empty`);
  if (name.length > DEFAULTS.maxNameLength) {
    throw invalidArgument(`${what} must be at most ${DEFAULTS.maxNameLength} characters, got ${name.length}`);
  }
  return name;
}

export function duration(value: unknown, option: string, min: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > DEFAULTS.maxDuration) {
    throw invalidArgument(
      `\`${option}\` must be an integer number of milliseconds ≥ ${min} and ≤ ${DEFAULTS.maxDuration}, got ${show(value)}`,
    );
  }
  return value;
}

export function optionalDuration(value: unknown, option: string, min: number, fallback: number): number {
  return value === undefined ? fallback : duration(value, option, min);
}

export function optionalBoolean(value: unknown, option: string, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw invalidArgument(`\`${option}\` must be a boolean, got ${show(value)}`);
  return value;
}

export function optionalSignal(value: unknown): AbortSignal | undefined {
  if (value === undefined) return undefined;
  if (!(value instanceof AbortSignal)) throw invalidArgument(`\`signal\` must be an AbortSignal, got ${show(value)}`);
  return value;
}

export function optionalFraction(value: unknown, option: string, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value >= 1) {
    throw invalidArgument(`\`${option}\` must be a number ≥ 0 and < 1, got ${show(value)}`);
  }
  return value;
}

export function optionalWhenUnavailable(value: unknown, allowed: readonly WhenUnavailable[]): WhenUnavailable {
  if (value === undefined) return DEFAULTS.whenUnavailable;
  if (typeof value !== 'string' || !(allowed as readonly string[]).includes(value)) {
    throw invalidArgument(
      `\`whenUnavailable\` must be one of ${allowed.map((a) => `'${a}'`).join(', ')}, got ${show(value)}`,
    );
  }
  return value as WhenUnavailable;
}

export function prefix(value: unknown): string {
  if (value === undefined) return DEFAULTS.prefix;
  if (typeof value !== 'string' || value.length === 0 || /[{}]/.test(value)) {
    throw invalidArgument(`\`prefix\` must be a non-empty string without braces, got ${show(value)}`);
  }
  return value;
}

export function options(value: unknown, what: string): Record<string, unknown> {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw invalidArgument(`${what} must be an object, got ${show(value)}`);
  }
  return value as Record<string, unknown>;
}

export function fn(value: unknown, what: string): void {
  if (typeof value !== 'function') throw invalidArgument(`${what} must be a function, got ${show(value)}`);
}

export function invalidBackends(): Error {
  return invalidArgument('an array of backends (Redlock) must hold at least one client or store');
}

export function quorum(value: unknown, nodes: number): number {
  const majority = Math.floor(nodes / 2) + 1;
  if (value === undefined) return majority;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < majority || value > nodes) {
    throw invalidArgument(
      `\`quorum\` must be an integer from ${majority} (a majority) to ${nodes}, got ${show(value)}`,
    );
  }
  return value;
}

export { show };
