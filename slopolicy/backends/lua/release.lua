-- release: give back a lease's concurrency slots (idempotent).
--
-- KEYS  1 tenant bucket   2 lane bucket   3 tenant leases   4 lane leases   5 lease hash
-- ARGV  1 lease id   2 now ('' = server TIME)   3 '1': abort, also refund the
--       cost (an acquire whose reply never came)   4 key grace (s)
-- Reply {1 if it held slots here else 0, now}
local id = ARGV[1]
local now = clock(ARGV[2])
local held = redis.call('ZREM', KEYS[3], id)
redis.call('ZREM', KEYS[4], id)
if ARGV[3] == '1' then
  local v = redis.call('HGET', KEYS[5], id)
  if v then
    local cost = lease_cost(v)
    -- A missing bucket is full: nothing to give back to it.
    for _, key in ipairs({KEYS[1], KEYS[2]}) do
      local b = load(key, nil, nil, now)
      if b and cost > 0 then
        refund(b, cost, now)
        save(b, tonumber(ARGV[4]))
      end
    end
  end
end
redis.call('HDEL', KEYS[5], id)
return {tostring(held), fmt(now)}
