local h = 0
for i = 1, #ARGV[1] do h = bit.bxor(bit.rol(h, 5), string.byte(ARGV[1], i)) end
local packed = struct.pack('>I4 i2 c0 d', bit.band(h, 0x7fffffff), -2, 'tail', 0.25)
local n, s, tail, d, next = struct.unpack('>I4 i2 c4 d', packed)
return {bit.tohex(h), bit.tohex(h, -4), bit.arshift(-256, 4), struct.size('!4 b i d'), n, s, tail, tostring(d), next, pcall(struct.pack, 'i99', 1)}
