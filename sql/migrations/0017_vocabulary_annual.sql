-- A seeded concept for the commonest review period of security questionnaires: "reviewed at least
-- annually", "tested in the last year", "every 12 months" (docs/answer-quality.md, "Fifth round").
-- A question asking whether something happened in the last year is answered by an entry saying
-- it happens annually, and the two share no lexeme.
--
-- Left out on purpose, because the english stemmer makes them the bare lexeme 'year' (so "data is
-- kept for seven years" would mean "annually"): 'yearly', 'each year', 'once a year'.
INSERT INTO knowledge_vocabulary (concept, phrase)
SELECT 'annual', p.phrase
  FROM unnest(ARRAY['annually', 'every year', 'last year', 'past year', 'per year',
                    'every 12 months', 'last 12 months', 'past 12 months', 'twelve months'])
       AS p(phrase);
