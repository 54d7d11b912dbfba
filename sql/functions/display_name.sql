-- How a user is shown: "First Last", or the e-mail's local part when no name is known.
CREATE OR REPLACE FUNCTION display_name(first_name text, last_name text, email text) RETURNS text
IMMUTABLE LANGUAGE sql AS $$
    SELECT coalesce(nullif(btrim(first_name || ' ' || last_name), ''), split_part(email, '@', 1))
$$;
