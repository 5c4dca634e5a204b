local count = 0
for i, key in ipairs(KEYS) do
  if redis.call("get", key) == ARGV[1] then
    redis.call("set", key, ARGV[1], "PX", ARGV[2])
    count = count + 1
  end
end
return count
