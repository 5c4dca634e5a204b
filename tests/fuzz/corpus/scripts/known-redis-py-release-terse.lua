local t=redis.call('get',KEYS[1]) -- mine
if not t or t~=ARGV[1] then return 0 end


redis.call('del',KEYS[1]) return 1