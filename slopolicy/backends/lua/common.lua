-- slopolicy quota store: shared prelude, prepended to every script.
--
-- The clock, number formatting and token-bucket arithmetic. The bucket code
-- mirrors slopolicy.core.quota.bucket.TokenBucket operation for operation (Lua
-- numbers are IEEE doubles, evaluated one operation at a time), so a bucket
-- here and one in memory given the same times and costs hold the same floats.
--
-- A bucket is a hash {level, last, rate, burst}: the level in cost units as
-- of `last` (clock seconds), refilled at `rate` up to `burst`. A missing key
-- is a full bucket: keys expire once their bucket would be full again.

-- Effects replication (the default since Redis 7) lets a script read TIME
-- and then write; older servers need it asked for.
if redis.replicate_commands then
  redis.replicate_commands()
end

local INF = math.huge

-- Seconds: the caller's clock when given (tests inject one), else the server's.
local function clock(arg)
  if arg ~= '' then
    return tonumber(arg)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

-- Every number leaves as a string that reads back to the same double
-- (a bare Lua number would be truncated to an integer reply).
local function fmt(x)
  return string.format('%.17g', x)
end

local function ulp(x)
  x = math.abs(x)
  if x == 0 then
    return math.ldexp(1, -1074)
  end
  local _, e = math.frexp(x)
  if e - 53 < -1074 then
    return math.ldexp(1, -1074)
  end
  return math.ldexp(1, e - 53)
end

local function level_at(b, t)
  local level = b.level + b.rate * (t - b.last)
  if level < b.burst then
    return level
  end
  return b.burst
end

-- Load a bucket. `rate`/`burst` (nil: keep the stored ones) are the limits
-- it should have; a stored bucket with other limits carries its level over,
-- clamped to the new burst, as TenantQuotas does on a tier change.
-- `b.plan` is the tier signature a tenant bucket was last carried to.
local function load(key, rate, burst, now)
  local v = redis.call('HMGET', key, 'level', 'last', 'rate', 'burst', 'plan')
  if not v[1] then
    if not rate then
      return nil
    end
    return {key = key, level = burst, last = now, rate = rate, burst = burst, dirty = false}
  end
  local b = {
    key = key,
    level = tonumber(v[1]),
    last = tonumber(v[2]),
    rate = tonumber(v[3]),
    burst = tonumber(v[4]),
    plan = v[5],
    dirty = false,
  }
  if rate and (b.rate ~= rate or b.burst ~= burst) then
    local t = math.max(now, b.last)
    local level = math.min(burst, math.max(-burst, level_at(b, t)))
    b = {key = key, level = level, last = t, rate = rate, burst = burst, plan = b.plan,
      dirty = true}
  end
  return b
end

local function save(b, grace)
  if b.plan then
    redis.call('HSET', b.key, 'level', fmt(b.level), 'last', fmt(b.last),
      'rate', fmt(b.rate), 'burst', fmt(b.burst), 'plan', b.plan)
  else
    redis.call('HSET', b.key, 'level', fmt(b.level), 'last', fmt(b.last),
      'rate', fmt(b.rate), 'burst', fmt(b.burst))
  end
  -- Gone once full again: a missing key reads as a full bucket.
  local ms = math.ceil(((b.burst - b.level) / b.rate + grace) * 1000)
  redis.call('PEXPIRE', b.key, math.max(ms, 1))
end

-- TokenBucket._first_time: the first float time at or after `guess` at which
-- `cost` can be taken (guess is exact but for rounding).
local function first_time(b, cost, guess)
  if level_at(b, guess) >= cost then
    return guess
  end
  local step = ulp(guess)
  local lo, hi = guess, guess + step
  while level_at(b, hi) < cost do
    lo, step = hi, step * 2
    hi = lo + step
  end
  while true do
    local mid = lo + (hi - lo) / 2
    if not (lo < mid and mid < hi) then
      return hi
    end
    if level_at(b, mid) < cost then
      lo = mid
    else
      hi = mid
    end
  end
end

-- TokenBucket.time_until: seconds from `now` until `cost` can be taken;
-- 0 if now, INF if never; never short.
local function time_until(b, cost, now)
  local start = math.max(now, b.last)
  if cost <= level_at(b, start) or cost == 0 then
    return 0
  end
  if cost > b.burst then
    return INF
  end
  local target = first_time(b, cost, start + (cost - level_at(b, start)) / b.rate)
  local wait = target - now
  while now + wait < target do
    wait = wait + ulp(wait)
  end
  return wait
end

local function advance(b, now)
  local t = math.max(now, b.last)
  b.level = level_at(b, t)
  b.last = t
end

local function take(b, cost, now)
  advance(b, now)
  b.level = b.level - cost
end

-- Debt is floored at -burst (the excess is forgiven); refunds stop at burst.
local function charge(b, amount, now)
  advance(b, now)
  local level = b.level - amount
  if level < -b.burst then
    level = -b.burst
  end
  b.level = level
end

local function refund(b, amount, now)
  advance(b, now)
  local level = b.level + amount
  if level > b.burst then
    level = b.burst
  end
  b.level = level
end

-- The lease hash holds "<cost> <lane>" per live lease id.
local function lease_cost(v)
  return tonumber(string.match(v, '^(%S+)'))
end

local function expire(keys, ms)
  for _, key in ipairs(keys) do
    redis.call('PEXPIRE', key, ms)
  end
end
