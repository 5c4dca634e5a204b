local t = {}
for i = 1, 10 do t[i] = redis.pcall('lpush', KEYS[2], i) end
local r = redis.call('lrange', KEYS[2], 0, -1)
local ok, err = pcall(function() return redis.call('incr', KEYS[1]) end)
redis.log(redis.LOG_NOTICE, cjson and "x" or "y")
return {r, tostring(ok), redis.sha1hex(ARGV[1]), math.random(100), string.format('%d', #t), redis.status_reply('OK'), redis.error_reply('E')}
