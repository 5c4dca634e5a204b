local tok = redis.call('LOCK.ACQUIRE', KEYS[1], ARGV[1], ARGV[2])
if tok then redis.call('LOCK.FENCE', KEYS[2], tok) end
local info = redis.call('LOCK.INFO', KEYS[1])
redis.call('LOCK.RENEW', KEYS[1], ARGV[1], tok or 0, 5000)
return {tok, info, redis.call('LOCK.RELEASE', KEYS[1], ARGV[1], tok or 0)}
