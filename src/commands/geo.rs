//! Geo commands: GEOADD, GEOPOS, GEODIST, GEOHASH, GEORADIUS,
//! GEORADIUSBYMEMBER (and their `_RO` forms), GEOSEARCH, GEOSEARCHSTORE.
//!
//! A geo set is a sorted set whose scores are 52-bit geohashes: 26 bits of
//! latitude (over Redis's -85.05112878 .. 85.05112878, the Web Mercator
//! limits) interleaved with 26 bits of longitude, the latitude in the even
//! bits. A member's position is the centre of its cell. A search by radius
//! or box covers the shape with a cell of a size chosen from the radius and
//! its eight neighbours, reads the members of each cell's score range in
//! score order, and keeps those within the shape by the haversine distance
//! on a sphere of Redis's radius. Everything here follows Redis 7.0
//! (`geo.c`, `geohash.c`, `geohash_helper.c`) step for step, in the same
//! floating-point operations, so that a search keeps and orders the same
//! members and every distance and coordinate prints the same digits.
//!
//! One difference: Redis sorts the points of a search with `COUNT` below
//! the number found by its own partial quicksort, which may order members at
//! exactly the same distance otherwise; here equal distances keep the order
//! in which the cells were read.

use bytes::Bytes;

use crate::keyspace::{ExecCtx, Keyspace, ReadCtx};
use crate::protocol::{parse_i64, ArgError, Args, Reply};

use super::containers::read;
use super::long_double;
use super::zsets::{self, parse_float, ZSet};
use super::{CmdError, CmdResult};

const STEP_MAX: u32 = 26;
const LAT_MIN: f64 = -85.05112878;
const LAT_MAX: f64 = 85.05112878;
const LON_MIN: f64 = -180.0;
const LON_MAX: f64 = 180.0;
/// Redis's Earth: the quadratic mean radius of WGS-84, in metres.
const EARTH_RADIUS: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;

fn deg_rad(degrees: f64) -> f64 {
    degrees * (std::f64::consts::PI / 180.0)
}

fn rad_deg(radians: f64) -> f64 {
    radians / (std::f64::consts::PI / 180.0)
}

// ---------------------------------------------------------------------------
// Geohash cells
// ---------------------------------------------------------------------------

/// A cell: `2 * step` bits of interleaved latitude (even bits) and
/// longitude (odd bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cell {
    bits: u64,
    step: u32,
}

/// A cell's extent in degrees: `(min, max)` of longitude and latitude.
#[derive(Debug, Clone, Copy)]
struct Area {
    lon: (f64, f64),
    lat: (f64, f64),
}

/// `v`'s 32 bits spread to the even bits of the result.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The even bits of `x`, gathered into 32 bits (`spread`'s inverse).
fn gather(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0xFFFF_FFFF) as u32
}

/// The cell of `step` holding a position, over the given ranges of
/// longitude and latitude; `None` outside them or Redis's limits.
fn encode_in(lon: f64, lat: f64, step: u32, lon_range: (f64, f64), lat_range: (f64, f64)) -> Option<Cell> {
    if !(LON_MIN..=LON_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    if lat < lat_range.0 || lat > lat_range.1 || lon < lon_range.0 || lon > lon_range.1 {
        return None;
    }
    let cells = (1u64 << step) as f64;
    let lat_offset = (lat - lat_range.0) / (lat_range.1 - lat_range.0) * cells;
    let lon_offset = (lon - lon_range.0) / (lon_range.1 - lon_range.0) * cells;
    Some(Cell { bits: spread(lat_offset as u32) | (spread(lon_offset as u32) << 1), step })
}

fn encode(lon: f64, lat: f64, step: u32) -> Option<Cell> {
    encode_in(lon, lat, step, (LON_MIN, LON_MAX), (LAT_MIN, LAT_MAX))
}

fn decode(cell: Cell) -> Area {
    let cells = (1u64 << cell.step) as f64;
    let (lat_cell, lon_cell) = (gather(cell.bits), gather(cell.bits >> 1));
    let edge = |i: u32, (min, max): (f64, f64)| min + (f64::from(i) / cells) * (max - min);
    Area {
        lat: (edge(lat_cell, (LAT_MIN, LAT_MAX)), edge(lat_cell.wrapping_add(1), (LAT_MIN, LAT_MAX))),
        lon: (edge(lon_cell, (LON_MIN, LON_MAX)), edge(lon_cell.wrapping_add(1), (LON_MIN, LON_MAX))),
    }
}

/// A cell's centre, within Redis's limits: `(longitude, latitude)`.
fn centre(area: &Area) -> (f64, f64) {
    let lon = ((area.lon.0 + area.lon.1) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((area.lat.0 + area.lat.1) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// A score as C converts a `double` to `uint64_t` on x86-64 (what Redis
/// does with a score it decodes, whatever the score is).
fn score_bits(score: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if score < TWO_63 {
        // Negative and NaN-free: the signed conversion, as the hardware's.
        score as i64 as u64
    } else if score < 2.0 * TWO_63 {
        ((score - TWO_63) as i64 as u64) ^ (1 << 63)
    } else {
        0
    }
}

/// The position a member's score stands for.
fn position(score: f64) -> (f64, f64) {
    centre(&decode(Cell { bits: score_bits(score), step: STEP_MAX }))
}

/// The score a position is stored under (the cell of the most steps).
fn score_of(lon: f64, lat: f64) -> Option<u64> {
    encode(lon, lat, STEP_MAX).map(|c| c.bits)
}

/// Moves a cell by one along longitude (`east`) or latitude (`north`),
/// wrapping around at the edges as Redis's neighbours do.
fn moved(cell: Cell, longitude: bool, forward: bool) -> Cell {
    let odd = 0xAAAA_AAAA_AAAA_AAAAu64;
    let even = 0x5555_5555_5555_5555u64;
    let (mine, other) = if longitude { (odd, even) } else { (even, odd) };
    let shift = 64 - cell.step * 2;
    let (moving, kept) = (cell.bits & mine, cell.bits & other);
    // Every bit that is not ours set, so that a carry runs through them.
    let fill = other >> shift;
    let moving = if forward { moving.wrapping_add(fill + 1) } else { (moving | fill).wrapping_sub(fill + 1) };
    Cell { bits: (moving & (mine >> shift)) | kept, step: cell.step }
}

/// The eight neighbours of a cell, in Redis's order after the cell
/// itself: north, south, east, west, north-east, north-west, south-east,
/// south-west.
fn neighbours(cell: Cell) -> [Cell; 8] {
    let step = |c: Cell, lon: i8, lat: i8| {
        let c = if lon != 0 { moved(c, true, lon > 0) } else { c };
        if lat != 0 { moved(c, false, lat > 0) } else { c }
    };
    [
        step(cell, 0, 1),
        step(cell, 0, -1),
        step(cell, 1, 0),
        step(cell, -1, 0),
        step(cell, 1, 1),
        step(cell, -1, 1),
        step(cell, 1, -1),
        step(cell, -1, -1),
    ]
}

// ---------------------------------------------------------------------------
// Distances and shapes
// ---------------------------------------------------------------------------

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// The haversine distance in metres.
///
/// The sines and cosines here are the `libm` crate's, the same bits on every
/// machine: a distance decides which members a `GEOSEARCHSTORE` stores, and
/// its `STOREDIST` stores the distance itself, on every node and at every
/// replay, and the C library's `sin`, `cos` and `asin` may differ in the last
/// bit from one version or CPU to another (`sqrt` is exact everywhere).
fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let v = libm::sin((deg_rad(lon2) - deg_rad(lon1)) / 2.0);
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let (lat1r, lat2r) = (deg_rad(lat1), deg_rad(lat2));
    let u = libm::sin((lat2r - lat1r) / 2.0);
    let a = u * u + libm::cos(lat1r) * libm::cos(lat2r) * v * v;
    2.0 * EARTH_RADIUS * libm::asin(a.sqrt())
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Shape {
    /// A radius, in the query's unit.
    Circle(f64),
    /// Width and height, in the query's unit.
    Box(f64, f64),
}

/// What to search: a shape around a centre, its sizes in a unit of
/// `to_metres` metres.
#[derive(Debug, Clone, Copy)]
struct Search {
    lon: f64,
    lat: f64,
    shape: Shape,
    to_metres: f64,
}

impl Search {
    /// The distance from the centre to a point, if the point is inside.
    fn contains(&self, lon: f64, lat: f64) -> Option<f64> {
        match self.shape {
            Shape::Circle(r) => Some(distance(self.lon, self.lat, lon, lat)).filter(|d| *d <= r * self.to_metres),
            Shape::Box(w, h) => {
                let (width, height) = (w * self.to_metres, h * self.to_metres);
                if lat_distance(lat, self.lat) > height / 2.0 || distance(lon, lat, self.lon, lat) > width / 2.0 {
                    return None;
                }
                Some(distance(self.lon, self.lat, lon, lat))
            }
        }
    }

    /// `(min lon, min lat, max lon, max lat)` around the shape.
    fn bounds(&self) -> (f64, f64, f64, f64) {
        let (half_width, half_height) = match self.shape {
            Shape::Circle(r) => (r, r),
            Shape::Box(w, h) => (w / 2.0, h / 2.0),
        };
        let (height, width) = (self.to_metres * half_height, self.to_metres * half_width);
        let lat_delta = rad_deg(height / EARTH_RADIUS);
        let lon_delta_top = rad_deg(width / EARTH_RADIUS / libm::cos(deg_rad(self.lat + lat_delta)));
        let lon_delta_bottom = rad_deg(width / EARTH_RADIUS / libm::cos(deg_rad(self.lat - lat_delta)));
        let lon_delta = if self.lat < 0.0 { lon_delta_bottom } else { lon_delta_top };
        (self.lon - lon_delta, self.lat - lat_delta, self.lon + lon_delta, self.lat + lat_delta)
    }

    /// The cells to read, in Redis's order, the unneeded ones left out.
    fn cells(&self) -> [Option<Cell>; 9] {
        let (min_lon, min_lat, max_lon, max_lat) = self.bounds();
        let radius = match self.shape {
            Shape::Circle(r) => r,
            Shape::Box(w, h) => ((w / 2.0) * (w / 2.0) + (h / 2.0) * (h / 2.0)).sqrt(),
        } * self.to_metres;
        let mut step = steps_for(radius, self.lat);
        let Some(mut cell) = encode(self.lon, self.lat, step) else { return [None; 9] };
        let mut around = neighbours(cell);
        let too_coarse = decode(around[0]).lat.1 < max_lat
            || decode(around[1]).lat.0 > min_lat
            || decode(around[2]).lon.1 < max_lon
            || decode(around[3]).lon.0 > min_lon;
        if step > 1 && too_coarse {
            step -= 1;
            let Some(c) = encode(self.lon, self.lat, step) else { return [None; 9] };
            cell = c;
            around = neighbours(cell);
        }
        let area = decode(cell);
        let mut cells = [Some(cell), None, None, None, None, None, None, None, None];
        for (slot, n) in cells[1..].iter_mut().zip(around) {
            *slot = Some(n);
        }
        if step >= 2 {
            // Indexes into `cells`: 1 N, 2 S, 3 E, 4 W, 5 NE, 6 NW, 7 SE, 8 SW.
            let mut clear = |which: [usize; 3]| which.iter().for_each(|i| cells[*i] = None);
            if area.lat.0 < min_lat {
                clear([2, 8, 7]);
            }
            if area.lat.1 > max_lat {
                clear([1, 5, 6]);
            }
            if area.lon.0 < min_lon {
                clear([4, 8, 6]);
            }
            if area.lon.1 > max_lon {
                clear([3, 7, 5]);
            }
        }
        cells
    }
}

/// The steps of the cells that cover a search of `radius` metres.
fn steps_for(mut radius: f64, lat: f64) -> u32 {
    if radius == 0.0 {
        return STEP_MAX;
    }
    let mut step: i32 = 1;
    while radius < MERCATOR_MAX {
        radius *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, STEP_MAX as i32) as u32
}

/// A member found by a search.
struct Point {
    member: Bytes,
    score: f64,
    lon: f64,
    lat: f64,
    /// Metres from the centre.
    dist: f64,
}

/// The members inside the search, cell by cell in Redis's order, each
/// cell's in score order; with `limit` (`COUNT n ANY`) it stops at n.
fn find(z: &ZSet, search: &Search, limit: usize) -> Vec<Point> {
    let cells = search.cells();
    let mut found = Vec::new();
    let mut last = 0;
    for (i, cell) in cells.iter().enumerate() {
        let Some(cell) = cell else { continue };
        // Huge radii can make neighbours the same cell: Redis skips a cell
        // equal to the last one it read (other than the first).
        if last != 0 && cells[last] == Some(*cell) {
            continue;
        }
        if limit != 0 && found.len() >= limit {
            break;
        }
        let shift = 52 - cell.step * 2;
        let (min, max) = ((cell.bits << shift) as f64, ((cell.bits + 1) << shift) as f64);
        let mut in_cell: Vec<(&Bytes, f64)> =
            z.iter().filter(|(_, s)| **s >= min && **s < max).map(|(m, s)| (m, *s)).collect();
        in_cell.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
        for (member, score) in in_cell {
            let (lon, lat) = position(score);
            if let Some(dist) = search.contains(lon, lat) {
                found.push(Point { member: member.clone(), score, lon, lat, dist });
            }
            if limit != 0 && found.len() >= limit {
                break;
            }
        }
        last = i;
    }
    found
}

// ---------------------------------------------------------------------------
// Arguments and replies
// ---------------------------------------------------------------------------

/// A longitude and latitude argument pair, as Redis checks them.
fn parse_lon_lat(lon: &[u8], lat: &[u8]) -> Result<(f64, f64), CmdError> {
    let lon = parse_float(lon).ok_or_else(not_float)?;
    let lat = parse_float(lat).ok_or_else(not_float)?;
    if !(LON_MIN..=LON_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return Err(CmdError::Other(format!("ERR invalid longitude,latitude pair {lon:.6},{lat:.6}")));
    }
    Ok((lon, lat))
}

fn not_float() -> CmdError {
    CmdError::Other("ERR value is not a valid float".into())
}

/// Metres per unit.
fn parse_unit(raw: &[u8]) -> Result<f64, CmdError> {
    match raw.to_ascii_lowercase().as_slice() {
        b"m" => Ok(1.0),
        b"km" => Ok(1000.0),
        b"ft" => Ok(0.3048),
        b"mi" => Ok(1609.34),
        _ => Err(CmdError::Other("ERR unsupported unit provided. please use M, KM, FT, MI".into())),
    }
}

/// `radius unit`: the radius and metres per unit.
fn parse_radius(radius: &[u8], unit: &[u8]) -> Result<(f64, f64), CmdError> {
    let r = parse_float(radius).ok_or_else(|| CmdError::Other("ERR need numeric radius".into()))?;
    if r < 0.0 {
        return Err(CmdError::Other("ERR radius cannot be negative".into()));
    }
    Ok((r, parse_unit(unit)?))
}

/// `width height unit`.
fn parse_box(width: &[u8], height: &[u8], unit: &[u8]) -> Result<(f64, f64, f64), CmdError> {
    let w = parse_float(width).ok_or_else(|| CmdError::Other("ERR need numeric width".into()))?;
    let h = parse_float(height).ok_or_else(|| CmdError::Other("ERR need numeric height".into()))?;
    if h < 0.0 || w < 0.0 {
        return Err(CmdError::Other("ERR height or width cannot be negative".into()));
    }
    Ok((w, h, parse_unit(unit)?))
}

/// A distance as Redis replies with one: four decimals, rounded half to
/// even.
fn distance_reply(d: f64) -> Reply {
    let units = (d * 10_000.0).round_ties_even();
    let text = if units == 0.0 {
        "0.0000".to_string()
    } else {
        let n = units as i64;
        let sign = if n < 0 { "-" } else { "" };
        let n = n.unsigned_abs();
        format!("{sign}{}.{:04}", n / 10_000, n % 10_000)
    };
    Reply::Bulk(Bytes::from(text))
}

/// A coordinate as Redis replies with one (`%.17Lf`, trailing zeros cut).
fn coordinate_reply(v: f64) -> Reply {
    Reply::DoubleText(long_double::to_human(long_double::from_f64(v)))
}

fn position_reply((lon, lat): (f64, f64)) -> Reply {
    Reply::Array(vec![coordinate_reply(lon), coordinate_reply(lat)])
}

/// Which of the search commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// GEORADIUS and GEORADIUS_RO (`store` says whether STORE is allowed).
    Radius { store: bool },
    /// GEORADIUSBYMEMBER and GEORADIUSBYMEMBER_RO.
    ByMember { store: bool },
    GeoSearch,
    GeoSearchStore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    Unsorted,
    Asc,
    Desc,
}

/// A parsed search command.
struct Query {
    /// `None` when the source key is missing and the command names a
    /// member: Redis parses the rest and answers as for an empty set.
    search: Option<Search>,
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    order: Order,
    /// 0: no limit.
    count: usize,
    any: bool,
    /// Where to store, and whether the distances (`STOREDIST`).
    store: Option<(Bytes, bool)>,
}

fn member_position(z: &ZSet, member: &[u8]) -> Result<(f64, f64), CmdError> {
    z.get(member)
        .map(|s| position(*s))
        .ok_or_else(|| CmdError::Other("ERR could not decode requested zset member".into()))
}

/// Parses a search command's arguments in Redis's order, with Redis's
/// errors; `z` is the source set (its members are centres).
fn parse_query(z: Option<&ZSet>, form: Form, argv: &[Bytes]) -> Result<Query, CmdError> {
    let mut center = None;
    let mut shape = None;
    let options = match form {
        Form::Radius { .. } => {
            center = Some(parse_lon_lat(&argv[2], &argv[3])?);
            let (r, unit) = parse_radius(&argv[4], &argv[5])?;
            shape = Some((Shape::Circle(r), unit));
            6
        }
        Form::ByMember { .. } => {
            if let Some(z) = z {
                center = Some(member_position(z, &argv[2])?);
                let (r, unit) = parse_radius(&argv[3], &argv[4])?;
                shape = Some((Shape::Circle(r), unit));
            }
            5
        }
        Form::GeoSearch => 2,
        Form::GeoSearchStore => 3,
    };
    let search_form = matches!(form, Form::GeoSearch | Form::GeoSearchStore);
    let store_allowed = matches!(form, Form::Radius { store: true } | Form::ByMember { store: true });
    let mut q = Query {
        search: None,
        with_dist: false,
        with_hash: false,
        with_coord: false,
        order: Order::Unsorted,
        count: 0,
        any: false,
        store: (form == Form::GeoSearchStore).then(|| (argv[1].clone(), false)),
    };
    let (mut from_member, mut from_lon_lat, mut by_radius, mut by_box) = (false, false, false, false);
    let mut i = options;
    while i < argv.len() {
        let left = argv.len() - i - 1;
        match argv[i].to_ascii_lowercase().as_slice() {
            b"withdist" => q.with_dist = true,
            b"withhash" => q.with_hash = true,
            b"withcoord" => q.with_coord = true,
            b"any" => q.any = true,
            b"asc" => q.order = Order::Asc,
            b"desc" => q.order = Order::Desc,
            b"count" if left >= 1 => {
                let n = parse_i64(&argv[i + 1]).ok_or(CmdError::Arg(ArgError::NotInteger))?;
                if n <= 0 {
                    return Err(CmdError::Other("ERR COUNT must be > 0".into()));
                }
                q.count = usize::try_from(n).unwrap_or(usize::MAX);
                i += 1;
            }
            b"store" if left >= 1 && store_allowed => {
                q.store = Some((argv[i + 1].clone(), false));
                i += 1;
            }
            b"storedist" if left >= 1 && store_allowed => {
                q.store = Some((argv[i + 1].clone(), true));
                i += 1;
            }
            b"storedist" if form == Form::GeoSearchStore => q.store = Some((argv[1].clone(), true)),
            b"frommember" if left >= 1 && search_form && !from_lon_lat => {
                if let Some(z) = z {
                    center = Some(member_position(z, &argv[i + 1])?);
                }
                from_member = true;
                i += 1;
            }
            b"fromlonlat" if left >= 2 && search_form && !from_member => {
                center = Some(parse_lon_lat(&argv[i + 1], &argv[i + 2])?);
                from_lon_lat = true;
                i += 2;
            }
            b"byradius" if left >= 2 && search_form && !by_box => {
                let (r, unit) = parse_radius(&argv[i + 1], &argv[i + 2])?;
                shape = Some((Shape::Circle(r), unit));
                by_radius = true;
                i += 2;
            }
            b"bybox" if left >= 3 && search_form && !by_radius => {
                let (w, h, unit) = parse_box(&argv[i + 1], &argv[i + 2], &argv[i + 3])?;
                shape = Some((Shape::Box(w, h), unit));
                by_box = true;
                i += 3;
            }
            _ => return Err(CmdError::Arg(ArgError::Syntax)),
        }
        i += 1;
    }
    if q.store.is_some() && (q.with_dist || q.with_hash || q.with_coord) {
        let what = if form == Form::GeoSearchStore { "GEOSEARCHSTORE" } else { "STORE option in GEORADIUS" };
        return Err(CmdError::Other(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    let name = String::from_utf8_lossy(&argv[0]);
    if search_form && !(from_member || from_lon_lat) {
        return Err(CmdError::Other(format!("ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}")));
    }
    if search_form && !(by_radius || by_box) {
        return Err(CmdError::Other(format!("ERR exactly one of BYRADIUS and BYBOX can be specified for {name}")));
    }
    if q.any && q.count == 0 {
        return Err(CmdError::Other("ERR the ANY argument requires COUNT argument".into()));
    }
    if let (Some((lon, lat)), Some((shape, to_metres))) = (center, shape) {
        q.search = Some(Search { lon, lat, shape, to_metres });
    }
    Ok(q)
}

/// Runs a parsed search over `z`: the points to reply with or store, in
/// their final order.
fn run(z: &ZSet, q: &Query, search: &Search) -> Vec<Point> {
    let mut found = find(z, search, if q.any { q.count } else { 0 });
    // COUNT without an order means the nearest (not with ANY).
    let order = if q.count != 0 && q.order == Order::Unsorted && !q.any { Order::Asc } else { q.order };
    match order {
        Order::Unsorted => {}
        Order::Asc => found.sort_by(|a, b| a.dist.partial_cmp(&b.dist).unwrap_or(std::cmp::Ordering::Equal)),
        Order::Desc => found.sort_by(|a, b| b.dist.partial_cmp(&a.dist).unwrap_or(std::cmp::Ordering::Equal)),
    }
    if q.count != 0 {
        found.truncate(q.count);
    }
    found
}

fn search_reply(points: Vec<Point>, q: &Query, to_metres: f64) -> Reply {
    let options = q.with_dist || q.with_hash || q.with_coord;
    Reply::Array(
        points
            .into_iter()
            .map(|p| {
                if !options {
                    return Reply::Bulk(p.member);
                }
                let mut item = vec![Reply::Bulk(p.member)];
                if q.with_dist {
                    item.push(distance_reply(p.dist / to_metres));
                }
                if q.with_hash {
                    item.push(Reply::Int(p.score as i64));
                }
                if q.with_coord {
                    item.push(position_reply((p.lon, p.lat)));
                }
                Reply::Array(item)
            })
            .collect(),
    )
}

/// A search that may store (GEORADIUS, GEORADIUSBYMEMBER, GEOSEARCHSTORE).
fn search_write(ks: &mut Keyspace, ctx: &mut ExecCtx, argv: &[Bytes], src: &Bytes, form: Form) -> CmdResult {
    let (q, points) = {
        let z = read::<ZSet>(ks, ctx.log_time, src)?;
        let q = parse_query(z, form, argv)?;
        // A missing source finds nothing (its STORE deletes the destination).
        let points = match (z, &q.search) {
            (Some(z), Some(search)) => run(z, &q, search),
            _ => Vec::new(),
        };
        (q, points)
    };
    let to_metres = q.search.map_or(1.0, |s| s.to_metres);
    let Some((dst, store_dist)) = q.store.clone() else { return Ok(search_reply(points, &q, to_metres)) };
    let result: ZSet = points
        .into_iter()
        .map(|p| (p.member, if store_dist { p.dist / to_metres } else { p.score }))
        .collect();
    let event = if form == Form::GeoSearchStore { "geosearchstore" } else { "georadiusstore" };
    zsets::store(ks, ctx, &dst, result, event)
}

/// A search that only reads (the `_RO` forms and GEOSEARCH).
fn search_read(ks: &Keyspace, ctx: &ReadCtx, argv: &[Bytes], form: Form) -> CmdResult {
    let z = read::<ZSet>(ks, ctx.now, &argv[1])?;
    let q = parse_query(z, form, argv)?;
    let (Some(z), Some(search)) = (z, q.search) else { return Ok(Reply::Array(Vec::new())) };
    let points = run(z, &q, &search);
    Ok(search_reply(points, &q, search.to_metres))
}

/// Where GEORADIUS and GEORADIUSBYMEMBER name a key to store in, as
/// Redis's `georadiusGetKeys` finds it: the argument after the last
/// `STORE` or `STOREDIST` from the sixth argument on.
pub fn store_key_position(argv: &[Bytes]) -> Option<usize> {
    let mut found = None;
    let mut i = 5;
    while i < argv.len() {
        let word = &argv[i];
        if (word.eq_ignore_ascii_case(b"store") || word.eq_ignore_ascii_case(b"storedist")) && i + 1 < argv.len() {
            found = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    found
}

// ---------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------

/// ```text
/// GEOADD key [NX | XX] [CH] longitude latitude member [longitude latitude member ...]
/// ```
/// ZADD of each member under its position's score; ZADD's reply.
pub fn geoadd(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    let argv = args.all();
    let mut first = 2;
    let (mut nx, mut xx) = (false, false);
    while let Some(opt) = argv.get(first) {
        match opt.to_ascii_lowercase().as_slice() {
            b"nx" => nx = true,
            b"xx" => xx = true,
            b"ch" => {}
            _ => break,
        }
        first += 1;
    }
    if !(argv.len() - first).is_multiple_of(3) || (nx && xx) {
        return Err(CmdError::Arg(ArgError::Syntax));
    }
    let mut zadd = Vec::with_capacity(first + (argv.len() - first) / 3 * 2);
    zadd.push(Bytes::from_static(b"zadd"));
    zadd.extend_from_slice(&argv[1..first]);
    for triple in argv[first..].chunks(3) {
        let (lon, lat) = parse_lon_lat(&triple[0], &triple[1])?;
        let score = score_of(lon, lat).ok_or_else(not_float)?;
        zadd.push(Bytes::from(score.to_string()));
        zadd.push(triple[2].clone());
    }
    zsets::zadd(ks, ctx, Args::new(&zadd))
}

/// ```text
/// GEOPOS key [member ...]
/// ```
/// Each member's `[longitude, latitude]`, a nil array for a missing one.
pub fn geopos(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let z = read::<ZSet>(ks, ctx.now, key)?;
    let positions = args.rest().iter().map(|m| match z.and_then(|z| z.get(m)) {
        Some(score) => position_reply(position(*score)),
        None => Reply::NilArray,
    });
    Ok(Reply::Array(positions.collect()))
}

/// ```text
/// GEOHASH key [member ...]
/// ```
/// Each member's 11-character geohash (standard ranges, the last character
/// always `0`: 52 bits carry ten), nil for a missing one.
pub fn geohash(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let key = args.next_bytes()?;
    let z = read::<ZSet>(ks, ctx.now, key)?;
    let hashes = args.rest().iter().map(|m| {
        let Some(score) = z.and_then(|z| z.get(m)) else { return Reply::Nil };
        let (lon, lat) = position(*score);
        let Some(cell) = encode_in(lon, lat, STEP_MAX, (-180.0, 180.0), (-90.0, 90.0)) else { return Reply::Nil };
        let text: Vec<u8> = (0..11)
            .map(|i| if i == 10 { ALPHABET[0] } else { ALPHABET[((cell.bits >> (52 - (i + 1) * 5)) & 0x1f) as usize] })
            .collect();
        Reply::Bulk(Bytes::from(text))
    });
    Ok(Reply::Array(hashes.collect()))
}

/// ```text
/// GEODIST key member1 member2 [M | KM | FT | MI]
/// ```
/// The distance between two members (4 decimals), nil if either is missing.
pub fn geodist(ks: &Keyspace, ctx: &ReadCtx, mut args: Args) -> CmdResult {
    let key = args.next_bytes()?;
    let (a, b) = (args.next_bytes()?, args.next_bytes()?);
    let to_metres = match args.rest() {
        [] => 1.0,
        [unit] => parse_unit(unit)?,
        _ => return Err(CmdError::Arg(ArgError::Syntax)),
    };
    let Some(z) = read::<ZSet>(ks, ctx.now, key)? else { return Ok(Reply::Nil) };
    let (Some(a), Some(b)) = (z.get(a), z.get(b)) else { return Ok(Reply::Nil) };
    let ((lon1, lat1), (lon2, lat2)) = (position(*a), position(*b));
    Ok(distance_reply(distance(lon1, lat1, lon2, lat2) / to_metres))
}

/// ```text
/// GEORADIUS key longitude latitude radius M|KM|FT|MI [WITHCOORD] [WITHDIST] [WITHHASH]
///     [COUNT count [ANY]] [ASC|DESC] [STORE key | STOREDIST key]
/// ```
pub fn georadius(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    let argv = args.all();
    search_write(ks, ctx, argv, &argv[1], Form::Radius { store: true })
}

/// ```text
/// GEORADIUSBYMEMBER key member radius M|KM|FT|MI [options as GEORADIUS]
/// ```
pub fn georadiusbymember(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    let argv = args.all();
    search_write(ks, ctx, argv, &argv[1], Form::ByMember { store: true })
}

/// ```text
/// GEORADIUS_RO key longitude latitude radius M|KM|FT|MI [options, no STORE]
/// ```
pub fn georadius_ro(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    search_read(ks, ctx, args.all(), Form::Radius { store: false })
}

/// ```text
/// GEORADIUSBYMEMBER_RO key member radius M|KM|FT|MI [options, no STORE]
/// ```
pub fn georadiusbymember_ro(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    search_read(ks, ctx, args.all(), Form::ByMember { store: false })
}

/// ```text
/// GEOSEARCH key FROMMEMBER member | FROMLONLAT longitude latitude
///     BYRADIUS radius unit | BYBOX width height unit
///     [ASC|DESC] [COUNT count [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH]
/// ```
pub fn geosearch(ks: &Keyspace, ctx: &ReadCtx, args: Args) -> CmdResult {
    search_read(ks, ctx, args.all(), Form::GeoSearch)
}

/// ```text
/// GEOSEARCHSTORE destination source FROMMEMBER ... | FROMLONLAT ...
///     BYRADIUS ... | BYBOX ... [ASC|DESC] [COUNT count [ANY]] [STOREDIST]
/// ```
/// The number of members stored in `destination` (deleted if none).
pub fn geosearchstore(ks: &mut Keyspace, ctx: &mut ExecCtx, args: Args) -> CmdResult {
    let argv = args.all();
    search_write(ks, ctx, argv, &argv[2], Form::GeoSearchStore)
}

#[cfg(test)]
mod tests {
    #[test]
    fn distances_are_the_same_bits_on_every_machine() {
        // Computed with the `libm` crate's sine, cosine and arcsine, which
        // do not depend on the C library: a GEOSEARCHSTORE ... STOREDIST
        // stores these bits on every node.
        let cases = [
            ((13.361389, 38.115556, 15.087269, 37.502669), 166274.25779140723_f64),
            ((-0.1278, 51.5074, 2.3522, 48.8566), 343652.9937778506),
            ((139.6917, 35.6895, -74.0060, 40.7128), 10851868.96025862),
            ((0.0, 0.0, 179.9999, 0.0001), 20020718.26950878),
        ];
        for ((lon1, lat1, lon2, lat2), metres) in cases {
            let d = distance(lon1, lat1, lon2, lat2);
            assert_eq!(d.to_bits(), metres.to_bits(), "{lon1},{lat1} to {lon2},{lat2}: {d:?}");
        }
    }

    use super::*;

    #[test]
    fn spreading_and_gathering_are_inverse() {
        for v in [0u32, 1, 2, 0x3ff_ffff, 0xdead_beef, u32::MAX] {
            assert_eq!(gather(spread(v)), v);
            assert_eq!(spread(v) & 0xAAAA_AAAA_AAAA_AAAA, 0);
        }
        assert_eq!(spread(0b1011), 0b1_00_01_01);
    }

    #[test]
    fn a_position_round_trips_within_its_cell() {
        // Palermo and Catania, Redis's documentation's example; their scores
        // are what Redis stores (ZSCORE after its GEOADD).
        assert_eq!(score_of(13.361389, 38.115556), Some(3479099956230698));
        assert_eq!(score_of(15.087269, 37.502669), Some(3479447370796909));
        let (lon, lat) = position(3479099956230698.0);
        assert!((lon - 13.361389).abs() < 1e-5 && (lat - 38.115556).abs() < 1e-5);
        assert_eq!(long_double::to_human(long_double::from_f64(lon)), "13.36138933897018433");
        assert_eq!(long_double::to_human(long_double::from_f64(lat)), "38.11555639549629859");
    }

    #[test]
    fn distances_are_redis_s() {
        let (a, b) = (position(3479099956230698.0), position(3479447370796909.0));
        assert_eq!(distance_reply(distance(a.0, a.1, b.0, b.1)), Reply::Bulk(Bytes::from_static(b"166274.1516")));
        assert_eq!(distance_reply(distance(a.0, a.1, b.0, b.1) / 1000.0), Reply::Bulk(Bytes::from_static(b"166.2742")));
        assert_eq!(distance_reply(0.0), Reply::Bulk(Bytes::from_static(b"0.0000")));
        assert_eq!(distance_reply(0.00005), Reply::Bulk(Bytes::from_static(b"0.0000")));
        assert_eq!(distance_reply(0.00016), Reply::Bulk(Bytes::from_static(b"0.0002")));
        assert_eq!(distance_reply(1234.56789), Reply::Bulk(Bytes::from_static(b"1234.5679")));
    }

    #[test]
    fn neighbours_wrap_and_move_one_cell() {
        let cell = encode(0.0, 0.0, 3).unwrap();
        let n = neighbours(cell);
        let (c, north, east) = (decode(cell), decode(n[0]), decode(n[2]));
        assert_eq!(north.lat.0, c.lat.1);
        assert_eq!(east.lon.0, c.lon.1);
        assert_eq!(north.lon, c.lon);
        // Moving west of the westmost cell wraps to the eastmost.
        let west_edge = encode(-180.0, 0.0, 4).unwrap();
        assert_eq!(decode(neighbours(west_edge)[3]).lon.1, 180.0);
    }

    #[test]
    fn the_store_key_is_the_last_named() {
        let argv = |w: &[&str]| w.iter().map(|s| Bytes::copy_from_slice(s.as_bytes())).collect::<Vec<_>>();
        assert_eq!(store_key_position(&argv(&["georadius", "k", "1", "2", "3", "m", "STORE", "d"])), Some(7));
        assert_eq!(store_key_position(&argv(&["georadius", "k", "1", "2", "3", "m", "store", "d", "storedist", "e"])), Some(9));
        assert_eq!(store_key_position(&argv(&["georadius", "k", "1", "2", "3", "m", "STORE"])), None);
        assert_eq!(store_key_position(&argv(&["georadiusbymember", "k", "m", "3", "km", "STORE", "d"])), Some(6));
    }
}
