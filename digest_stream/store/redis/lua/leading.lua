-- leading.lua: the leading edge: an add with an open nonce opens a new timeline's first
-- digest in the same call.
-- Holds: LEADING_NUMBER_FORMAT, LEADING_NUMBER_TEXT, LEADING_NUMBER_CACHED, leading_number,
--   leading_call, leading_pack, leading_records, leading_blob, lead, begin_leading,
--   end_leading.
-- Needs: CAUSES, DIGEST_ID_LENGTH, OPEN_NONCE_LENGTH (Python); digest_key (keys);
--   format_count, format_digest_meta (encoding); encode_inline (containers);
--   distinct_records, SHORT_STRING_HEADER, string_header (container_writes).
--
-- A timeline an add finds with nothing stored gets its first digest in that same add, in
-- exactly the state ds_open leaves: the digest (id: the nonce and its number) holds the
-- records, the timeline is READY and has nothing pending. It is an open digest like any
-- other, so one rule holds on every path: the caller publishes it and closes it once the
-- broker acknowledged it (ds_close_many: the close starts the cool-down), and until then
-- whatever comes for the timeline (records, a flush, flush_at) waits behind it. A publish
-- that fails, or a caller that is gone, leaves it open: an announcement (the caller's, a
-- take-over's, maintenance's) makes delivery reopen that very digest, same id.

-- A leading digest's number after its nonce: the rest of its id, zero-padded hex.
local LEADING_NUMBER_FORMAT = '%0' .. (DIGEST_ID_LENGTH - OPEN_NONCE_LENGTH) .. 'x'
-- Those texts by number, made once (filled as they come, as COUNT_TEXT), up to a bound: a
-- call leads at most one digest per timeline it names.
local LEADING_NUMBER_TEXT = {}
local LEADING_NUMBER_CACHED = 4096

local function leading_number(count)
    local text = LEADING_NUMBER_TEXT[count]
    if text == nil then
        text = string.format(LEADING_NUMBER_FORMAT, count)
        if count <= LEADING_NUMBER_CACHED then
            LEADING_NUMBER_TEXT[count] = text
        end
    end
    return text
end

-- The library functions lead uses per timeline, as upvalues (a global function costs two
-- table reads per use; the library's load cannot read them: begin_leading does).
local leading_call, leading_pack

-- The records of a timeline's first batch of more than one record as its digest holds them
-- (a repeated id keeps its first place and its last value, as store_batch does), or nil
-- when the policy's capacity would trim them: that rare timeline takes the path of an open
-- instead. (One record is never trimmed: a capacity is at least 1.)
local function leading_records(timeline)
    local records = distinct_records(timeline.batch)
    local capacity = timeline.policy.capacity
    if capacity > 0 and #records > capacity then
        return nil
    end
    return records
end

-- The leading digest numbered `number` as stored: byte for byte encode_inline(meta,
-- records), the meta being format_digest_meta's (only the id and the count vary), packed
-- by hand for the usual single record: one concatenation of parts made once per call
-- (cmsgpack.pack of a table cost twice as much).
local function leading_blob(leading, number, records)
    if #records ~= 1 then
        return encode_inline(leading.nonce .. number .. leading.meta_middle
            .. format_count(#records) .. leading.meta_end, records)
    end
    local record = records[1]
    local id, payload = record.id, record.payload
    return leading.single_head .. number .. leading.single_tail
        .. (SHORT_STRING_HEADER[#id] or string_header(#id)) .. id
        .. leading_pack(record.timestamp)
        .. (SHORT_STRING_HEADER[#payload] or string_header(#payload)) .. payload
end

-- Gives `timeline` (absent before this add) its leading digest, opened: the digest
-- written under its id (the nonce and its number), the timeline left READY (write_back
-- lists it) with no records of its own, its name listed in call.leading. Returns false
-- (nothing written) when the timeline must be announced instead.
local function lead(call, timeline)
    local records = timeline.batch
    if #records > 1 then
        records = leading_records(timeline)
        if records == nil then
            return false
        end
    end
    local leading, name = call.leading, timeline.timeline
    local count = leading.count + 1
    leading.count = count
    leading_call('SET', digest_key(call.tag, name),
        leading_blob(leading, leading_number(count), records), 'PX', timeline.policy.ttl_ms_text)
    -- the caller holds these records and makes the id (the nonce and the number: the
    -- name's place in this list): it is told the name only
    leading.opened[count] = name
    return true
end

-- The leading state of an add call (nil: not asked, or a batch holding controls, whose
-- cancels must reach these records: it announces instead).
local function begin_leading(call)
    if call.open_nonce == nil or call.controls ~= nil then
        return nil
    end
    leading_call, leading_pack = redis.call, cmsgpack.pack
    local template = format_digest_meta({id = '', opened_at = call.now, dropped = 0,
        records = 0, expired = false, cause = CAUSES.immediate})
    local middle, last = string.match(template, '^(|[^|]*|[^|]*|)0(|.*)$')
    local nonce = call.open_nonce
    -- a one-record digest: its meta's msgpack header and the nonce, then its number, then
    -- the rest of its meta (its count: 1)
    local single_tail = middle .. '1' .. last
    return {count = 0, opened = {}, nonce = nonce, meta_middle = middle, meta_end = last,
        single_head = string_header(DIGEST_ID_LENGTH + #single_tail) .. nonce,
        single_tail = single_tail}
end

-- After write_back: the READY list the add returns leaves out the timelines it led (their
-- digests are open, the caller publishes them), and the led ones in the order of their
-- digests' numbers.
local function end_leading(call, totals)
    local leading = call.leading
    if leading == nil or leading.count == 0 then
        return totals.ready, {}
    end
    local opened = leading.opened
    if leading.count == #totals.ready then
        -- every timeline made READY was led (each is listed once in either list)
        return {}, opened
    end
    local led = {}
    for _, name in ipairs(opened) do
        led[name] = true
    end
    local ready = {}
    for _, name in ipairs(totals.ready) do
        if not led[name] then
            ready[#ready + 1] = name
        end
    end
    return ready, opened
end
