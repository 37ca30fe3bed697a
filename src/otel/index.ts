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
  const lockAttrs: LockAttributes = (m) => ({
    ...(named ? { 'leasehold.lock.name': m.name } : {}),
    ...(m.instance === undefined ? {} : { 'leasehold.instance': m.instance }),
  });
  const meters = createMeters(meter);
  const on = new Subscriptions();

  on.traced<AcquireContext>(CHANNELS.acquire, acquireSpans(tracer, meters, lockAttrs));
  on.traced<ExtendContext>(CHANNELS.extend, {
    asyncEnd: (ctx) => {
      if (ctx.outcome === 'failed') meters.extendFailures.add(1, lockAttrs(ctx));
    },
  });
  on.traced<ReleaseContext>(CHANNELS.release, {
    asyncEnd: (ctx) => meters.holdDuration.record(ctx.heldFor, { ...lockAttrs(ctx), 'leasehold.ended': 'released' }),
  });
  on.listen<LostMessage>(CHANNELS.lost, (m) => {
    const attrs = { ...lockAttrs(m), 'leasehold.reason': m.reason };
    meters.lost.add(1, attrs);
    meters.holdDuration.record(m.heldFor, { ...lockAttrs(m), 'leasehold.ended': 'lost' });
  });
  on.listen<BackendErrorMessage>(CHANNELS.backendError, (m) =>
    meters.backendErrors.add(1, { 'leasehold.instance': m.instance, 'leasehold.operation': m.operation }),
  );
  on.listen<HandOffMessage>(CHANNELS.handoff, (m) =>
    meters.handoffs.add(1, named ? { 'leasehold.lock.name': m.name } : {}),
  );
  on.listen<JobMessage>(CHANNELS.job, jobRecorder(tracer, meters));

  return { uninstall: () => on.uninstall() };
}

/** A lock's attributes on a metric point: its instance, and its name if asked for. */
type LockAttributes = (m: { name: string; instance?: string }) => Attributes;

type Meters = ReturnType<typeof createMeters>;

/** The instruments of METRICS, created in one place. */
function createMeters(meter: Meter) {
  return {
    acquisitions: meter.createCounter(METRICS.acquisitions, {
      description: 'Acquisitions by outcome (acquired, LOCK_TIMEOUT, STORE_UNAVAILABLE, …)',
    }),
    acquireWait: meter.createHistogram(METRICS.acquireWait, {
      description: 'Time from acquire() to its outcome, waiting included',
      unit: 'ms',
    }),
    holdDuration: meter.createHistogram(METRICS.holdDuration, {
      description: 'Time a lease was held, grant to release or loss',
      unit: 'ms',
    }),
    lost: meter.createCounter(METRICS.lost, { description: 'Leases lost while held, by reason' }),
    extendFailures: meter.createCounter(METRICS.extendFailures, {
      description: 'Extensions the backend did not confirm (the watchdog retries until the validity ends)',
    }),
    backendErrors: meter.createCounter(METRICS.backendErrors, {
      description: 'Background backend failures, by operation',
    }),
    handoffs: meter.createCounter(METRICS.handoffs, { description: 'Hand-offs heard by this process' }),
    jobRuns: meter.createCounter(METRICS.jobRuns, { description: 'Job ticks run here, by outcome' }),
    jobSkips: meter.createCounter(METRICS.jobSkips, { description: 'Job ticks skipped here, by reason' }),
  };
}

/** The channels subscribed to, each with the way to unsubscribe it. */
class Subscriptions {
  readonly #undo: (() => void)[] = [];

  traced<C extends object>(channel: string, handlers: Handlers<C>): void {
    const tc = tracingChannel<C, C>(channel);
    tc.subscribe(handlers as never);
    this.#undo.push(() => tc.unsubscribe(handlers as never));
  }

  listen<M>(channel: string, onMessage: (message: M) => void): void {
    const handler = (message: unknown) => onMessage(message as M);
    subscribe(channel, handler);
    this.#undo.push(() => unsubscribe(channel, handler));
  }

  uninstall(): void {
    for (const u of this.#undo.splice(0)) u();
  }
}

/** A span from acquire() to its outcome, and the acquisition and its wait counted. */
function acquireSpans(tracer: Tracer, meters: Meters, lockAttrs: LockAttributes): Handlers<AcquireContext> {
  const spans = new WeakMap<object, Span>();
  return {
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
      meters.acquisitions.add(1, attrs);
      if (ctx.waited !== undefined) meters.acquireWait.record(ctx.waited, attrs);
      const span = spans.get(ctx);
      if (!span) return;
      span.setAttribute('leasehold.outcome', outcome);
      if (ctx.waited !== undefined) span.setAttribute('leasehold.waited', ctx.waited);
      if (ctx.fencingToken !== undefined) span.setAttribute('leasehold.fencing_token', ctx.fencingToken);
      span.end();
      spans.delete(ctx);
    },
  };
}

/** A job tick run or skipped here counted; a run that finished (not lost) as a span of its duration. */
function jobRecorder(tracer: Tracer, meters: Meters): (m: JobMessage) => void {
  return (m) => {
    const attrs: Attributes = { 'leasehold.job.name': m.name, 'leasehold.instance': m.instance };
    if (m.outcome === 'skipped') {
      meters.jobSkips.add(1, { ...attrs, 'leasehold.reason': m.reason ?? 'unknown' });
      return;
    }
    meters.jobRuns.add(1, { ...attrs, 'leasehold.outcome': m.outcome });
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
  };
}
