import {
  AggregationTemporality,
  InMemoryMetricExporter,
  MeterProvider,
  PeriodicExportingMetricReader,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterEach, describe, expect, it } from 'vitest';
import { Leasehold, MemoryStore } from '../../../src/index.js';
import { type Instrumentation, instrument, METRICS } from '../../../src/otel/index.js';

/** leasehold/otel, read back through the OpenTelemetry SDK's in-memory exporters. */
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function setup(lockNameInMetrics = false) {
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
  const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 60_000 });
  const meterProvider = new MeterProvider({ readers: [reader] });
  const instrumentation: Instrumentation = instrument({ tracerProvider, meterProvider, lockNameInMetrics });
  cleanups.push(
    () => instrumentation.uninstall(),
    () => meterProvider.shutdown(),
  );
  const points = async (name: string) => {
    await reader.forceFlush();
    const metrics = exporter.getMetrics().flatMap((r) => r.scopeMetrics.flatMap((s) => s.metrics));
    type Point = { readonly value: unknown; readonly attributes: Record<string, unknown> };
    return metrics.filter((m) => m.descriptor.name === name).flatMap((m) => m.dataPoints as readonly Point[]);
  };
  return { spans, points };
}

function leasehold(store = new MemoryStore()): Leasehold {
  const locks = new Leasehold(store, { instance: 'pod-a' });
  cleanups.push(() => locks.close());
  return locks;
}

describe('leasehold/otel', () => {
  it('an acquire span with its wait, and the acquisition, wait and hold metrics', async () => {
    const { spans, points } = setup();
    const locks = leasehold();
    const lock = await locks.acquire('order:1', { ttl: 5_000 });
    await lock.release();
    const [span] = spans.getFinishedSpans().filter((s) => s.name === 'leasehold.acquire');
    expect(span?.attributes).toMatchObject({
      'leasehold.lock.name': 'order:1',
      'leasehold.instance': 'pod-a',
      'leasehold.outcome': 'acquired',
      'leasehold.fencing_token': lock.fencingToken,
    });
    const acquired = await points(METRICS.acquisitions);
    expect(acquired).toContainEqual(
      expect.objectContaining({ value: 1, attributes: expect.objectContaining({ 'leasehold.outcome': 'acquired' }) }),
    );
    // Names stay off metric points unless asked for.
    expect(acquired.every((p) => !('leasehold.lock.name' in p.attributes))).toBe(true);
    expect((await points(METRICS.acquireWait))[0]?.value).toMatchObject({ count: 1 });
    expect((await points(METRICS.holdDuration))[0]?.value).toMatchObject({ count: 1 });
  });

  it('timeouts are counted and their span is an error; lost leases and job runs and skips are counted', async () => {
    const { spans, points } = setup(true);
    const store = new MemoryStore();
    const [a, b] = [leasehold(store), leasehold(store)];
    const held = await a.acquire('x', { ttl: 5_000, autoExtend: false });
    await expect(b.acquire('x', { wait: 0 })).rejects.toThrow();
    const failed = spans.getFinishedSpans().find((s) => s.attributes['leasehold.outcome'] === 'LOCK_TIMEOUT');
    expect(failed?.status.code).toBe(2);
    await store.forceRelease('x');
    await expect(held.extend()).rejects.toThrow();
    expect(await points(METRICS.lost)).toContainEqual(
      expect.objectContaining({
        attributes: expect.objectContaining({ 'leasehold.reason': 'expired', 'leasehold.lock.name': 'x' }),
      }),
    );
    await a.runOnce('report', () => 1, { tick: 1_000 });
    await b.runOnce('report', () => 2, { tick: 1_000 });
    expect(await points(METRICS.jobRuns)).toContainEqual(
      expect.objectContaining({ value: 1, attributes: expect.objectContaining({ 'leasehold.outcome': 'ran' }) }),
    );
    expect(await points(METRICS.jobSkips)).toContainEqual(
      expect.objectContaining({ value: 1, attributes: expect.objectContaining({ 'leasehold.reason': 'already-ran' }) }),
    );
    expect(spans.getFinishedSpans().some((s) => s.name === 'leasehold.job')).toBe(true);
  });

  it('uninstall stops every span and metric', async () => {
    const { spans } = setup();
    cleanups.at(0)?.();
    const locks = leasehold();
    await (await locks.acquire('y')).release();
    expect(spans.getFinishedSpans()).toHaveLength(0);
  });
});
