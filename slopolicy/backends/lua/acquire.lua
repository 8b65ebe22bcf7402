-- acquire: admit one request, all of a tenant's checks in one atomic call.
--
-- KEYS  1 tenant bucket   2 lane bucket   3 tenant leases (zset id -> expiry)
--       4 lane leases (zset)   5 lease hash (id -> "<cost> <lane>")
--       6.. the tier's other lane buckets
-- ARGV  1 lease id   2 cost   3 now ('' = server TIME)   4 lease ttl (s)
--       5 key grace (s)   6 rate   7 burst ('' '': no tenant bucket)
--       8 lane rate   9 lane burst ('' '': no lane bucket)
--       10 tenant cap   11 lane cap ('': none)   12 lane name
--       13 '1': the cost is over a burst (the caller knows); only follow a
--          tier change, as a refused request does, and refuse
--       14 the tier's signature   15.. rate, burst of each of KEYS 6..
-- Reply {'ok', now, in_flight} | {'over_burst'}
--     | {'concurrency', in_flight, cap} | {'lane_concurrency', in_lane, cap}
--     | {'rate', 'tenant'|'lane', wait, level, rate, burst}
--
-- Retried with the same lease id (a lost reply), it grants nothing twice.
local id, cost = ARGV[1], tonumber(ARGV[2])
local now = clock(ARGV[3])
local ttl, grace = tonumber(ARGV[4]), tonumber(ARGV[5])

if redis.call('HEXISTS', KEYS[5], id) == 1 then
  return {'ok', fmt(now), tostring(redis.call('ZCARD', KEYS[3]))}
end

-- Leases past their expiry belong to replicas that stopped renewing them
-- (crashed, or cut off longer than the ttl): their slots come back here.
local now_s = fmt(now)
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now_s)
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_s)
  for i = 1, #expired, 1000 do
    redis.call('HDEL', KEYS[5], unpack(expired, i, math.min(i + 999, #expired)))
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now_s)

-- Buckets first: a tier change carries their levels over even when refused,
-- every lane bucket of the tier at once (as TenantQuotas does); the tenant
-- bucket records the tier it was last carried to, so that is rare work.
local tb, lb
local plan = ARGV[14]
if ARGV[6] ~= '' then
  tb = load(KEYS[1], tonumber(ARGV[6]), tonumber(ARGV[7]), now)
  if tb.plan ~= plan then
    for i = 6, #KEYS do
      local other = load(KEYS[i], tonumber(ARGV[2 * i + 3]), tonumber(ARGV[2 * i + 4]), now)
      if other.dirty then save(other, grace) end
    end
    tb.plan, tb.dirty = plan, true
  end
end
if ARGV[8] ~= '' then
  lb = load(KEYS[2], tonumber(ARGV[8]), tonumber(ARGV[9]), now)
end
if tb and tb.dirty then save(tb, grace) end
if lb and lb.dirty then save(lb, grace) end
if ARGV[13] == '1' then
  return {'over_burst'}
end

local in_flight = redis.call('ZCARD', KEYS[3])
if ARGV[10] ~= '' and in_flight >= tonumber(ARGV[10]) then
  return {'concurrency', tostring(in_flight), ARGV[10]}
end
local in_lane = redis.call('ZCARD', KEYS[4])
if ARGV[11] ~= '' and in_lane >= tonumber(ARGV[11]) then
  return {'lane_concurrency', tostring(in_lane), ARGV[11]}
end

local wait = tb and time_until(tb, cost, now) or 0
local lane_wait = lb and time_until(lb, cost, now) or 0
if wait > 0 or lane_wait > 0 then
  -- Levels only rise while nothing is taken: both grant at the later time.
  local b, which = tb, 'tenant'
  if lane_wait > wait then
    b, which, wait = lb, 'lane', lane_wait
  end
  return {'rate', which, fmt(wait), fmt(level_at(b, math.max(now, b.last))),
    fmt(b.rate), fmt(b.burst)}
end

if tb then take(tb, cost, now); save(tb, grace) end
if lb then take(lb, cost, now); save(lb, grace) end
local expiry = fmt(now + ttl)
redis.call('ZADD', KEYS[3], expiry, id)
redis.call('ZADD', KEYS[4], expiry, id)
redis.call('HSET', KEYS[5], id, fmt(cost) .. ' ' .. ARGV[12])
expire({KEYS[3], KEYS[4], KEYS[5]}, math.ceil((ttl + grace) * 1000))
return {'ok', now_s, tostring(in_flight + 1)}
