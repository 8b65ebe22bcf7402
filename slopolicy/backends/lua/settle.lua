-- settle: reconcile a lease's charge with its actual cost.
--
-- KEYS  1 tenant bucket   2 lane bucket   3 tenant leases   4 lane leases   5 lease hash
-- ARGV  1 lease id   2 actual cost   3 cost this replica believes charged
--       4 now ('' = server TIME)   5 key grace (s)
--       6 rate   7 burst ('' '': no tenant bucket)   8 lane rate   9 lane burst
--       10 lane name
-- Reply {charged before, now}
--
-- The difference is taken against the charge the lease hash records, so a
-- retried settle (a lost reply) changes nothing the second time. A lease the
-- store no longer has (lost in a restart) settles against the replica's word.
-- It settles on the buckets the tenant has now; a missing key is a full
-- bucket with the lease's limits.
local id, actual = ARGV[1], tonumber(ARGV[2])
local now = clock(ARGV[4])
local grace = tonumber(ARGV[5])
local held = redis.call('HGET', KEYS[5], id)
local charged = held and lease_cost(held) or tonumber(ARGV[3])
local difference = actual - charged
if difference ~= 0 then
  local buckets = {}
  if ARGV[6] ~= '' then
    buckets[#buckets + 1] = load(KEYS[1], nil, nil, now)
      or load(KEYS[1], tonumber(ARGV[6]), tonumber(ARGV[7]), now)
  end
  if ARGV[8] ~= '' then
    buckets[#buckets + 1] = load(KEYS[2], nil, nil, now)
      or load(KEYS[2], tonumber(ARGV[8]), tonumber(ARGV[9]), now)
  end
  for _, b in ipairs(buckets) do
    if difference > 0 then
      charge(b, difference, now)
    else
      refund(b, -difference, now)
    end
    save(b, grace)
  end
end
if held then
  redis.call('HSET', KEYS[5], id, fmt(actual) .. ' ' .. ARGV[10])
end
return {fmt(charged), fmt(now)}
