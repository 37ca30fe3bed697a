import { CronTime } from 'cron';
import { describe, expect, it } from 'vitest';
import { ErrorCode } from '../../src/index.js';
import { cronTickOf } from '../../src/nestjs/cron-tick.js';

/**
 * @Once names a call's tick from @Cron's metadata: the latest occurrence of the expression at or
 * before the call, which is the scheduled time of the fire (the `cron` package that
 * @nestjs/schedule runs fires at or after it). Checked against the `cron` package's own schedule.
 */

const at = (iso: string) => Date.parse(iso);
const tickOf = (metadata: object, now: number) => cronTickOf(metadata, 'Test.job')?.(now);

describe('the tick of a @Cron fire', () => {
  it('is the latest occurrence at or before the call', () => {
    const every5 = { cronTime: '0 */5 * * * *', timeZone: 'Etc/UTC' };
    expect(tickOf(every5, at('2026-12-03T10:07:30.250Z'))).toBe(at('2026-12-03T10:05:00.000Z'));
    expect(tickOf(every5, at('2026-12-03T10:10:00.000Z'))).toBe(at('2026-12-03T10:10:00.000Z'));
    expect(tickOf(every5, at('2026-12-03T10:09:59.999Z'))).toBe(at('2026-12-03T10:05:00.000Z'));
    expect(tickOf({ cronTime: '* * * * * *' }, at('2026-12-03T10:00:01.730Z'))).toBe(at('2026-12-03T10:00:01.000Z'));
  });

  it('follows the time zone or the UTC offset, and looks back as far as the expression needs', () => {
    const seoul = { cronTime: '0 0 3 * * *', timeZone: 'Asia/Seoul' };
    expect(tickOf(seoul, at('2026-12-03T10:00:00Z'))).toBe(at('2026-12-02T18:00:00Z'));
    expect(tickOf({ cronTime: '0 0 12 * * *', utcOffset: 60 }, at('2026-12-03T11:30:00Z'))).toBe(
      at('2026-12-03T11:00:00Z'),
    );
    const yearly = { cronTime: '0 0 0 1 1 *', timeZone: 'Etc/UTC' };
    expect(tickOf(yearly, at('2026-12-03T10:00:00Z'))).toBe(at('2026-01-01T00:00:00Z'));
  });

  it('agrees with the schedule of the cron package for the expressions of CronExpression', () => {
    const expressions = ['*/10 * * * * *', '0 */30 9-17 * * *', '0 0 */2 * * *', '0 30 11 * * 1-5', '0 0 0 1 * *'];
    const from = new Date('2026-12-03T10:07:30.250Z');
    for (const cronTime of expressions) {
      const fires = new CronTime(cronTime, 'Europe/Paris');
      let next = fires.getNextDateFrom(from, 'Europe/Paris').toMillis();
      for (let i = 0; i < 5; i++) {
        const metadata = { cronTime, timeZone: 'Europe/Paris' };
        expect(tickOf(metadata, next), `${cronTime} at ${new Date(next).toISOString()}`).toBe(next);
        expect(tickOf(metadata, next + 900), `${cronTime} 900 ms late`).toBe(next);
        next = fires.getNextDateFrom(new Date(next), 'Europe/Paris').toMillis();
      }
    }
  });

  it('a one-off @Cron(date) is its own tick; no @Cron, no tick; a bad expression is refused', () => {
    const date = new Date('2026-12-24T18:00:00Z');
    expect(tickOf({ cronTime: date }, Date.now())).toBe(date.getTime());
    expect(tickOf({ cronTime: { toJSDate: () => date } }, Date.now())).toBe(date.getTime());
    expect(cronTickOf(undefined, 'Test.job')).toBeNull();
    expect(() => cronTickOf({ cronTime: 'every day' }, 'Test.job')).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_ARGUMENT, message: expect.stringMatching(/Test\.job/) }),
    );
  });
});
