import { subscribe, tracingChannel, unsubscribe } from 'node:diagnostics_channel';
import {
  type Attributes,
  type Meter,
  type MeterProvider,
  metrics,
  type Span,
  SpanStatusCode,
  type Tracer,
  type TracerProvider,
  trace,
} from '@opentelemetry/api';
import {
  type AcquireContext,
  type BackendErrorMessage,
  CHANNELS,
  type ExtendContext,
  type HandOffMessage,
  type JobMessage,
  type LostMessage,
  type ReleaseContext,
} from '../core/diagnostics.js';

/**
 * leasehold/otel: OpenTelemetry spans and metrics from leasehold's diagnostics channels. One call
 * covers every Leasehold of the process; `@opentelemetry/api` is an optional peer, loaded only
 * by this entry point.
 */
export interface InstrumentOptions {
  /** Default: the global tracer provider (`trace.getTracerProvider()`). */
  readonly tracerProvider?: TracerProvider;
  /** Default: the global meter provider (`metrics.getMeterProvider()`). */
  readonly meterProvider?: MeterProvider;
  /**
   * Put the lock's name on metric points (`leasehold.lock.name`). Off by default: lock names are
   * often per entity (order:1001) and would make every metric a high-cardinality one. Spans always
   * carry the name.
   */
  readonly lockNameInMetrics?: boolean;
}

export interface Instrumentation {
  /** Stop: unsubscribe from every channel. */
  uninstall(): void;
}

/** The metrics, by name; see docs/observability.md for what each means. */
export const METRICS = Object.freeze({
  acquisitions: 'leasehold.acquisitions',
  acquireWait: 'leasehold.acquire.wait',
  holdDuration: 'leasehold.hold.duration',
  lost: 'leasehold.lost',
  extendFailures: 'leasehold.extend.failures',
  backendErrors: 'leasehold.backend.errors',
  handoffs: 'leasehold.handoffs',
  jobRuns: 'leasehold.job.runs',
  jobSkips: 'leasehold.job.skips',
});

type Handlers<C> = {
  start?: (context: C) => void;
  end?: (context: C) => void;
  asyncStart?: (context: C) => void;
  asyncEnd?: (context: C) => void;
  error?: (context: C & { error?: unknown }) => void;
};

const VERSION = '0.1.0';

/** Subscribe OpenTelemetry spans and metrics to every Leasehold of this process. */
export function instrument(options: InstrumentOptions = {}): Instrumentation {
  const tracer: Tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer('leasehold', VERSION);
  const meter: Meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter('leasehold', VERSION);
  const named = options.lockNameInMetrics === true;
  const lockAttrs = (m: { name: string; instance?: string }): Attributes => ({
    ...(named ? { 'leasehold.lock.name': m.name } : {}),
    ...(m.instance === undefined ? {} : { 'leasehold.instance': m.instance }),
  });

  const acquisitions = meter.createCounter(METRICS.acquisitions, {
    description: 'Acquisitions by outcome (acquired, LOCK_TIMEOUT, STORE_UNAVAILABLE, …)',
  });
  const acquireWait = meter.createHistogram(METRICS.acquireWait, {
    description: 'Time from acquire() to its outcome, waiting included',
    unit: 'ms',
  });
  const holdDuration = meter.createHistogram(METRICS.holdDuration, {
    description: 'Time a lease was held, grant to release or loss',
    unit: 'ms',
  });
  const lost = meter.createCounter(METRICS.lost, { description: 'Leases lost while held, by reason' });
  const extendFailures = meter.createCounter(METRICS.extendFailures, {
    description: 'Extensions the backend did not confirm (the watchdog retries until the validity ends)',
  });
  const backendErrors = meter.createCounter(METRICS.backendErrors, {
    description: 'Background backend failures, by operation',
  });
  const handoffs = meter.createCounter(METRICS.handoffs, { description: 'Hand-offs heard by this process' });
  const jobRuns = meter.createCounter(METRICS.jobRuns, { description: 'Job ticks run here, by outcome' });
  const jobSkips = meter.createCounter(METRICS.jobSkips, { description: 'Job ticks skipped here, by reason' });

  const spans = new WeakMap<object, Span>();
  const undo: (() => void)[] = [];

  function traced<C extends object>(channel: string, handlers: Handlers<C>): void {
    const tc = tracingChannel<C, C>(channel);
    tc.subscribe(handlers as never);
    undo.push(() => tc.unsubscribe(handlers as never));
  }
  function listen<M>(channel: string, onMessage: (message: M) => void): void {
    const handler = (message: unknown) => onMessage(message as M);
    subscribe(channel, handler);
    undo.push(() => unsubscribe(channel, handler));
  }

  traced<AcquireContext>(CHANNELS.acquire, {
    start: (ctx) => {
      spans.set(
        ctx,
        tracer.startSpan('leasehold.acquire', {
          attributes: {
            'leasehold.lock.name': ctx.name,
            'leasehold.instance': ctx.instance,
            'leasehold.lock.kind': ctx.kind,
            'leasehold.wait': ctx.wait,
            'leasehold.ttl': ctx.ttl,
          },
        }),
      );
    },
    error: (ctx) => {
      const span = spans.get(ctx);
      if (ctx.error instanceof Error) span?.recordException(ctx.error);
      span?.setStatus({ code: SpanStatusCode.ERROR, message: ctx.outcome ?? 'error' });
    },
    asyncEnd: (ctx) => {
      const outcome = ctx.outcome ?? 'error';
      const attrs = { ...lockAttrs(ctx), 'leasehold.outcome': outcome };
      acquisitions.add(1, attrs);
      if (ctx.waited !== undefined) acquireWait.record(ctx.waited, attrs);
      const span = spans.get(ctx);
      if (!span) return;
      span.setAttribute('leasehold.outcome', outcome);
      if (ctx.waited !== undefined) span.setAttribute('leasehold.waited', ctx.waited);
      if (ctx.fencingToken !== undefined) span.setAttribute('leasehold.fencing_token', ctx.fencingToken);
      span.end();
      spans.delete(ctx);
    },
  });
  traced<ExtendContext>(CHANNELS.extend, {
    asyncEnd: (ctx) => {
      if (ctx.outcome === 'failed') extendFailures.add(1, lockAttrs(ctx));
    },
  });
  traced<ReleaseContext>(CHANNELS.release, {
    asyncEnd: (ctx) => holdDuration.record(ctx.heldFor, { ...lockAttrs(ctx), 'leasehold.ended': 'released' }),
  });
  listen<LostMessage>(CHANNELS.lost, (m) => {
    const attrs = { ...lockAttrs(m), 'leasehold.reason': m.reason };
    lost.add(1, attrs);
    holdDuration.record(m.heldFor, { ...lockAttrs(m), 'leasehold.ended': 'lost' });
  });
  listen<BackendErrorMessage>(CHANNELS.backendError, (m) =>
    backendErrors.add(1, { 'leasehold.instance': m.instance, 'leasehold.operation': m.operation }),
  );
  listen<HandOffMessage>(CHANNELS.handoff, (m) => handoffs.add(1, named ? { 'leasehold.lock.name': m.name } : {}));
  listen<JobMessage>(CHANNELS.job, (m) => {
    const attrs: Attributes = { 'leasehold.job.name': m.name, 'leasehold.instance': m.instance };
    if (m.outcome === 'skipped') {
      jobSkips.add(1, { ...attrs, 'leasehold.reason': m.reason ?? 'unknown' });
      return;
    }
    jobRuns.add(1, { ...attrs, 'leasehold.outcome': m.outcome });
    if (m.outcome === 'lost') return;
    const end = Date.now();
    const span = tracer.startSpan('leasehold.job', {
      startTime: end - (m.duration ?? 0),
      attributes: {
        ...attrs,
        'leasehold.outcome': m.outcome,
        ...(m.tick ? { 'leasehold.job.tick': m.tick.toISOString() } : {}),
        ...(m.fencingToken ? { 'leasehold.fencing_token': m.fencingToken } : {}),
      },
    });
    if (m.outcome === 'failed') span.setStatus({ code: SpanStatusCode.ERROR });
    span.end(end);
  });

  return {
    uninstall: () => {
      for (const u of undo.splice(0)) u();
    },
  };
}
