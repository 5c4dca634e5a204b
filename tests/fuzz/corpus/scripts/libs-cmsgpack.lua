local packed = cmsgpack.pack({1, 'two', {three = 3}}, -1.5, true, 2^40)
local a, b, c, d = cmsgpack.unpack(packed)
local next_offset, one = cmsgpack.unpack_one(packed)
local limited = {cmsgpack.unpack_limit(packed, 2, next_offset)}
return {#packed, a[2], a[3].three, tostring(b), tostring(c), d, next_offset, #limited, pcall(cmsgpack.unpack, '\221\0\0\0\9')}
