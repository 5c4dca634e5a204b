//! The libraries against replies recorded from Redis, and against hostile
//! input.

use bytes::{Bytes, BytesMut};

use super::redis_cases::CASES;
use crate::protocol::{encode_reply, Reply};
use crate::scripting::{run, INSTRUCTION_BUDGET};

fn eval(body: &[u8], argv: &[&[u8]]) -> Reply {
    let argv: Vec<Bytes> = argv.iter().map(|a| Bytes::copy_from_slice(a)).collect();
    let mut call = |_: &[Bytes]| Reply::Nil;
    run(body, &[], &argv, INSTRUCTION_BUDGET, &mut call)
}

/// Runs `body` without arguments.
fn eval_str(body: &str) -> Reply {
    eval(body.as_bytes(), &[])
}

fn resp2(reply: &Reply) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_reply(reply, false, &mut out);
    out.to_vec()
}

/// The recorded cases whose reply differs from Redis's only in the order of
/// an object's or map's keys: Redis walks a table in the order its keys sit,
/// raftlock in one order every node shares (booleans, numbers, strings, each
/// ascending; `scripting::TableKey`), and these are raftlock's replies.
const WALKED_IN_KEY_ORDER: [(&str, &[u8]); 3] = [
    (
        "local t = {} for i = 1, 50 do t['k' .. i] = i end return cjson.encode(t)",
        b"$433\r\n{\"k1\":1,\"k10\":10,\"k11\":11,\"k12\":12,\"k13\":13,\"k14\":14,\"k15\":15,\"k16\":16,\"k17\":17,\"k18\":18,\"k19\":19,\"k2\":2,\"k20\":20,\"k21\":21,\"k22\":22,\"k23\":23,\"k24\":24,\"k25\":25,\"k26\":26,\"k27\":27,\"k28\":28,\"k29\":29,\"k3\":3,\"k30\":30,\"k31\":31,\"k32\":32,\"k33\":33,\"k34\":34,\"k35\":35,\"k36\":36,\"k37\":37,\"k38\":38,\"k39\":39,\"k4\":4,\"k40\":40,\"k41\":41,\"k42\":42,\"k43\":43,\"k44\":44,\"k45\":45,\"k46\":46,\"k47\":47,\"k48\":48,\"k49\":49,\"k5\":5,\"k50\":50,\"k6\":6,\"k7\":7,\"k8\":8,\"k9\":9}\r\n",
    ),
    ("return cjson.encode({x = 1, y = 'two', z = {1, 2}})", b"$27\r\n{\"x\":1,\"y\":\"two\",\"z\":[1,2]}\r\n"),
    (
        "local function ser(v) local t = type(v) if t == 'table' then local ks = {} for k in pairs(v) do ks[#ks+1] = k end table.sort(ks, function(a, b) if type(a) ~= type(b) then return type(a) < type(b) end return a < b end) local o = {} for _, k in ipairs(ks) do o[#o+1] = ser(k) .. '=' .. ser(v[k]) end return '{' .. table.concat(o, ',') .. '}' elseif t == 'number' then return string.format('%.17g', v) elseif t == 'string' then return string.format('%q', v) elseif t == 'userdata' then return 'NULL' else return tostring(v) end end local function all(...) local t = {n = select('#', ...), ...} local o = {} for i = 1, t.n do o[i] = ser(t[i]) end return t.n .. ':' .. table.concat(o, ' ') end return all(cmsgpack.pack({x = {y = {1, 2}}, z = 'w'}))",
        b"$17\r\n1:\"\x82\xa1x\x81\xa1y\x92\x01\x02\xa1z\xa1w\"\r\n",
    ),
];

/// Every recorded case gives, byte for byte, the reply Redis 7.0 gave
/// (errors included, with Redis's `script: <sha>, on @user_script:1.`).
#[test]
fn replies_match_redis() {
    let mut differences = Vec::new();
    for (body, argv, expected) in CASES {
        let got = resp2(&eval(body, argv));
        let expected = match WALKED_IN_KEY_ORDER.iter().find(|(b, _)| b.as_bytes() == *body) {
            Some((_, ours)) => *ours,
            None => *expected,
        };
        if got != expected {
            differences.push(format!(
                "{}\n   redis: {:?}\n   ours:  {:?}",
                String::from_utf8_lossy(body),
                String::from_utf8_lossy(expected),
                String::from_utf8_lossy(&got)
            ));
        }
    }
    assert!(differences.is_empty(), "{} of {} cases differ:\n{}", differences.len(), CASES.len(), differences.join("\n"));
}

fn is_err(reply: &Reply, needle: &str) -> bool {
    matches!(reply, Reply::Error(e) if e.contains(needle))
}

/// Nesting is bounded in Rust whatever a script configures: past 1000
/// levels, Redis's errors, never a stack overflow.
#[test]
fn deep_and_cyclic_input_is_refused() {
    let deep_json = "cjson.decode_max_depth(2^31 - 1) return cjson.decode(string.rep('[', 100000))";
    assert!(is_err(&eval_str(deep_json), "Found too many nested data structures (1001) at character 1001"));
    let deep_objects = "cjson.decode_max_depth(2^31 - 1) return cjson.decode(string.rep('{\"k\":', 100000))";
    assert!(is_err(&eval_str(deep_objects), "Found too many nested data structures (1001)"));
    let cyclic = "cjson.encode_max_depth(2^31 - 1) local t = {} t[1] = t return cjson.encode(t)";
    assert!(is_err(&eval_str(cyclic), "Cannot serialise, excessive nesting (1001)"));
    let cyclic_object = "cjson.encode_max_depth(2^31 - 1) local t = {} t.k = {t} return cjson.encode(t)";
    assert!(is_err(&eval_str(cyclic_object), "Cannot serialise, excessive nesting (1001)"));
    // msgpack nests through arrays, map values and map keys.
    for nest in ["'\\145'", "'\\129\\1'", "'\\129'"] {
        let body = format!("return cmsgpack.unpack(string.rep({nest}, 100000) .. '\\1')");
        assert!(is_err(&eval_str(&body), "stack overflow"), "{body}");
    }
    // A cyclic table packs as 16 levels and then nil, as in Redis.
    let packed = eval_str("local t = {} t[1] = t return #cmsgpack.pack(t)");
    assert_eq!(packed, Reply::Int(17));
}

/// Work done in Rust is paid from the script's budget: a small script cannot
/// make a call loop for long.
#[test]
fn work_in_the_libraries_is_charged() {
    // A format of spaces produces nothing but takes a step each.
    let spaces = eval_str("local f = string.rep(' ', 1e7) for i = 1, 3 do struct.size(f) end");
    assert!(is_err(&spaces, "budget"), "{spaces:?}");
    // A table that holds itself twice per level: 2^40 leaves.
    let dag = "local t = {} for i = 1, 40 do t = {t, t} end return #cjson.encode(t)";
    assert!(is_err(&eval_str(dag), "budget"));
    let dag = "local t = {} for i = 1, 15 do t = {t, t, t, t, t, t, t, t} end return #cmsgpack.pack(t)";
    assert!(is_err(&eval_str(dag), "budget"));
    // Many small calls add up too.
    let small = "local s = '[' .. string.rep('1,', 5000) .. '1]' for i = 1, 1e6 do cjson.decode(s) end";
    assert!(is_err(&eval_str(small), "budget"));
}

/// Output is built in Rust only up to what the script's memory still holds.
#[test]
fn outputs_past_the_memory_limit_are_refused() {
    // 10 MB of control bytes become 60 MB of escapes.
    assert!(is_err(&eval_str("return #cjson.encode(string.rep('\\1', 1e7))"), "not enough memory"));
    // One 10 MB string packed 7000 times would be 70 GB.
    let many = "local s = string.rep('x', 1e7) local t = {} for i = 1, 7000 do t[i] = s end \
                return #struct.pack(string.rep('c0', 7000), unpack(t))";
    assert!(is_err(&eval_str(many), "not enough memory"));
    let many = "local s = string.rep('x', 1e7) local t = {} for i = 1, 3000 do t[i] = s end \
                return #cmsgpack.pack(unpack(t))";
    assert!(is_err(&eval_str(many), "not enough memory"));
    // Huge counts fail before anything is built.
    for body in [
        "return struct.pack('i9999999999', 1)",
        "return struct.pack('c4294967295', 'x')",
        "return struct.pack('c2147483647', 'x')",
        "return struct.unpack('c2147483647', 'x')",
        "return cmsgpack.unpack('\\221\\255\\255\\255\\255')",
        "return cmsgpack.unpack('\\219\\255\\255\\255\\255abc')",
    ] {
        assert!(matches!(eval_str(body), Reply::Error(_)), "{body}");
    }
    // Below the limit, big outputs work.
    assert_eq!(eval_str("return #cjson.encode(string.rep('x', 1e7))"), Reply::Int(10_000_002));
}

/// Thousands of results reach Lua (up to Redis's stack limit) without mlua
/// holding a reference to each.
#[test]
fn many_results_stay_within_lua_limits() {
    assert_eq!(eval_str("return select('#', cmsgpack.unpack(string.rep('\\161a', 7998)))"), Reply::Int(7998));
    assert_eq!(eval_str("return select('#', struct.unpack(string.rep('c1', 7997), string.rep('x', 7997)))"), Reply::Int(7998));
    assert!(is_err(&eval_str("return cmsgpack.unpack(string.rep('\\161a', 8000))"), "stack overflow"));
}

/// `cjson`'s configuration lasts for one run: the next script, on this VM or
/// any other, starts from the defaults.
#[test]
fn cjson_configuration_does_not_outlive_a_run() {
    assert_eq!(eval_str("cjson.encode_max_depth(1) cjson.encode_number_precision(2) return cjson.encode(3.14159)"), Reply::bulk("3.1"));
    assert_eq!(eval_str("return cjson.encode({{3.14159}})"), Reply::bulk("[[3.14159]]"));
    assert_eq!(eval_str("return tostring(cjson.null)"), Reply::bulk("userdata: (nil)"));
}
