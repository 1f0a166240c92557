-- leading.lua: the leading edge: an add with an open nonce opens a new timeline's first
-- digest in the same call.
-- Holds: LEADING_NUMBER_FORMAT, LEADING_NUMBER_TEXT, leading_records, lead, begin_leading,
--   end_leading.
-- Needs: CAUSES, DIGEST_ID_LENGTH, OPEN_NONCE_LENGTH (Python); digest_key (keys);
--   format_count, format_digest_meta (encoding); encode_inline (containers);
--   distinct_records, SHORT_STRING_HEADER, string_header (container_writes);
--   bind_call_functions, msgpack_pack, redis_call (digests).
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
-- Those texts by number, made once (filled as they come, as COUNT_TEXT), up to 4096: a
-- call leads at most one digest per timeline it names.
local LEADING_NUMBER_TEXT = {}

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

-- Gives `timeline` (absent before this add) its leading digest, opened: the digest
-- written under its id (the nonce and its number), the timeline left READY (write_back
-- lists it) with no records of its own, its name listed in call.leading. Returns false
-- (nothing written) when the timeline must be announced instead.
-- The digest as stored: byte for byte encode_inline(meta, records), the meta being
-- format_digest_meta's (only the id and the count vary), packed by hand for the usual
-- single record: one concatenation of parts made once per call (cmsgpack.pack of a table
-- cost twice as much).
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
    local number = LEADING_NUMBER_TEXT[count]
    if number == nil then
        number = string.format(LEADING_NUMBER_FORMAT, count)
        if count <= 4096 then
            LEADING_NUMBER_TEXT[count] = number
        end
    end
    local blob
    if #records == 1 then
        local record = records[1]
        local id, payload = record.id, record.payload
        blob = leading.single_head .. number .. leading.single_tail
            .. (SHORT_STRING_HEADER[#id] or string_header(#id)) .. id
            .. msgpack_pack(record.timestamp)
            .. (SHORT_STRING_HEADER[#payload] or string_header(#payload)) .. payload
    else
        blob = encode_inline(leading.nonce .. number .. leading.meta_middle
            .. format_count(#records) .. leading.meta_end, records)
    end
    redis_call('SET', digest_key(call.tag, name), blob, 'PX', timeline.policy.ttl_ms_text)
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
    bind_call_functions() -- lead's redis_call, msgpack_pack
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
