local doc = cjson.decode('{"owner":"a","n":[1,2.5,null,true],"nested":{"k":"v\\/\\u00e9"}}')
local ok, err = pcall(cjson.decode, '[1,')
doc.n[#doc.n + 1] = doc.nested.k
cjson.encode_number_precision(4)
return {cjson.encode(doc.n), cjson.encode({}), err, tostring(doc.n[3] == cjson.null), pcall(cjson.encode, {[1] = 1, [100] = 2})}
